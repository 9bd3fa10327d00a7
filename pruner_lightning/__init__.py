"""pruner-lightning from Python: plug our cost models and Pruner's search into your own TVM script.

    import pruner_lightning as pl
    target = pl.setup(target)              # parse the target, prepare this process
    pl.builder()                           # a builder whose builds do not time out
    pl.cost_model(mode, model)             # PAM / MoA / TenSet MLP as an ms cost model
    pl.draft_verify(device, **options)     # Pruner's draft-then-verify search strategy
    pl.evolutionary(**options)             # MetaSchedule's evolutionary search, resumable
    pl.load_model(path)                    # a trained model (artifact or train.py checkpoint)

The package is the top layer, beside train.py and tune.py (it imports bridge/, data/, tvm_env/;
nothing below imports it). It also carries the packaged training configs (`config_files`) and the
wheel's console entry points (`cli`). Importing it loads neither TVM nor torch. See docs/api.md.
"""

from pruner_lightning.api import builder, cost_model, draft_verify, evolutionary, load_model, setup

__all__ = ["builder", "cost_model", "draft_verify", "evolutionary", "load_model", "setup"]
