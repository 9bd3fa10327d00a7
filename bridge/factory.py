"""Build a tuning run's parts from the typed configs: the cost model, its state file, the search.

`COST_MODELS` is the `--cost-model` list: our modes (`bridge.cost_model.MODES`, derived from the model
registry) plus MetaSchedule's XGBoost and random models. Every cost model's state is saved as
`cost_model.<name>.bin` in the output dir, in a format that runs no code when loaded (torch
weights_only for ours, `bridge.xgb.SafeXGBModel` for XGBoost; random keeps none).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import warnings
from pathlib import Path
from typing import Any

from bridge.config import CostModelConfig, SearchConfig
from tvm_env import ms

__all__ = [
    "COST_MODELS",
    "first_drafts_at_once",
    "is_pretrained",
    "load_state",
    "make_cost_model",
    "make_strategy",
    "resolve_first_draft_threads",
    "resolve_verify_gate",
    "save_state",
    "state_file",
]

log = logging.getLogger(__name__)


def _modes() -> tuple[str, ...]:
    from pruner_models.registry import tuning_modes

    return (*tuning_modes(), "xgb", "random")


COST_MODELS = _modes()
"""pam, pam-siamese-update, pam-no-update, mlp, mlp-no-update, xgb, random."""


def _policy(name: str) -> str:
    """Cost model `name`'s tuning policy (`pruner_models.registry.tuning_modes`): "scratch",
    "siamese-update" or "no-update"; "scratch" for MetaSchedule's models (xgb, random)."""
    from pruner_models.registry import tuning_modes

    mode = tuning_modes().get(name)
    return "scratch" if mode is None else mode[1]


def is_pretrained(name: str) -> bool:
    """Whether cost model `name` starts from a pretrained model (not from nothing, as pam, mlp and xgb)."""
    return _policy(name) != "scratch"


def resolve_verify_gate(search: SearchConfig, cost_model: str, adapt_every: int | None = None) -> SearchConfig:
    """`search` with an unset `verify_gate` decided: on for a pretrained `cost_model` (`is_pretrained`)
    that does not adapt every round (the `*-no-update` modes, and `pam-siamese-update` with
    `adapt_every` > 1; None: `CostModelConfig`'s default), off otherwise, and off for MetaSchedule's
    evolution (no draft to gate to).

    MoA adapting every 4th round did better with the gate (docs/benchmarks.md, "The verify gate on the
    GPU"); adapting every round without it reached XGB's final 1.19x sooner than that, over 15 seeds
    ("MoA adapting every round, on the GPU"), and replayed, the gate cost it peak@1."""
    if search.verify_gate is not None:
        return search
    if adapt_every is None:
        adapt_every = CostModelConfig.adapt_every  # the dataclass field's default
    policy = _policy(cost_model)
    adapts_every_round = policy == "siamese-update" and adapt_every == 1
    gated = search.psa is not None and policy != "scratch" and not adapts_every_round
    return dataclasses.replace(search, verify_gate=gated)


def resolve_first_draft_threads(search: SearchConfig, cores: int, tasks: int) -> SearchConfig:
    """`search` with an unset `first_draft_threads` decided: the host's `cores` shared among the first
    drafts that run at once (`first_drafts_ahead`, at most the run's `tasks`), at least one thread each.
    A single task's first draft, or drafts in turn (no pipeline, or `first_drafts_ahead` 0), keep every core.

    On one H200 machine's 16 cores, drafts that shared the cores drafted faster and cost fewer
    core-seconds than drafts of 16 threads each: two at once on 8 threads gave 3.6 drafts a minute
    against 3.4-3.5 on 16, and four at once on 4 gave 4.5-5.0 (docs/benchmarks.md, "Four first drafts
    of four threads")."""
    if search.first_draft_threads is not None or search.psa is None:
        return search
    return dataclasses.replace(search, first_draft_threads=max(1, cores // first_drafts_at_once(search, tasks)))


def first_drafts_at_once(search: SearchConfig, tasks: int) -> int:
    """How many first drafts of a run of `tasks` tasks run at once under `search`: `first_drafts_ahead`, at
    most the tasks, with a pipeline; one (each in its task's first round) without, or with
    `first_drafts_ahead` 0; none for MetaSchedule's evolution (no PSA: no draft)."""
    if search.psa is None:
        return 0
    return max(1, min(search.first_drafts_ahead, tasks)) if search.pipeline else 1


def make_cost_model(config: CostModelConfig, *, target: Any = None, cores: int = 1, features: Any = None) -> Any:
    """The cost model of `config`. A pretrained mode without a checkpoint takes the model that ships
    for the target's device (`bridge.pretrained`).

    `features` is the run's `data.features.FeatureCache` (shared with the PSA draft), for our models.

    xgb is MetaSchedule's XGBModel (with a pickle-free state file) and no warm-up (by default it
    predicts at random until 100 measurements, so a short run would never use it). With `target`,
    an artifact trained on another device kind (a cuda artifact on llvm) draws a loud warning:
    transfer is legitimate (MoA adapts across devices) but rarely what a user meant.

    Raises:
        ValueError: unknown name, or a checkpoint given to / missing for a mode (see PrunerCostModel).
    """
    name = config.name
    if name not in COST_MODELS:
        raise ValueError(f"--cost-model {name!r} must be one of {COST_MODELS}")
    if name in ("xgb", "random"):
        if config.checkpoint is not None:
            raise ValueError(f"--cost-model {name} takes no --checkpoint (got {config.checkpoint!r})")
        if name == "random":
            return ms.cost_model.RandomModel(seed=config.seed)
        from bridge.xgb import SafeXGBModel

        return SafeXGBModel(num_warmup_samples=0, num_tuning_cores=cores)
    from bridge.cost_model import PrunerCostModel
    from bridge.export import device_kind, load_model

    artifact: Any = config.checkpoint  # a scratch mode refuses it in PrunerCostModel, naming it
    pretrained = is_pretrained(name)
    if pretrained and artifact is None and target is not None:
        from bridge.pretrained import find_pretrained

        artifact = str(find_pretrained(name, target))  # the shipped model for this device
        log.info("--cost-model %s: using the shipped pretrained model %s", name, artifact)
    if artifact is not None and pretrained:
        artifact = load_model(artifact)
        source, here = device_kind(artifact.source_device), None if target is None else target.kind.name
        if source is not None and here is not None and source != here:
            message = (
                f"{config.checkpoint}: a model trained on {artifact.source_device!r} measurements scores {here} "
                "candidates; its ranking may not transfer (pam-siamese-update adapts it, the others do not)"
            )
            warnings.warn(message, UserWarning, stacklevel=2)
            log.warning(message)
    return PrunerCostModel(
        mode=name,
        artifact=artifact,
        epochs=config.epochs,
        background=config.background_update,
        adapt_every=config.adapt_every,
        seed=config.seed,
        features=features,
        device=config.model_device,
    )


def state_file(out: str | os.PathLike, name: str) -> Path:
    """Where the state of cost model `name` lives in an output dir."""
    return Path(out) / f"cost_model.{name}.bin"


def save_state(model: Any, out: str | os.PathLike, name: str, *, wait: bool = True) -> None:
    """Save the cost model's state atomically (random keeps none); `wait=False` lets our cost models
    write it after their training in the background (`bridge.cost_model.PrunerCostModel.save_later`)."""
    if name == "random":
        return
    if wait or not hasattr(model, "save_later"):  # MetaSchedule's models save at once
        model.save(str(state_file(out, name)))
    else:
        model.save_later(str(state_file(out, name)))


def load_state(model: Any, out: str | os.PathLike, name: str) -> bool:
    """Load the state an earlier run left in `out`, if any; whether one was loaded.

    Raises:
        ValueError: a state file that is unreadable, of another mode, or not pickle-free (names it).
    """
    path = state_file(out, name)
    if name == "random" or not path.exists():
        return False
    model.load(str(path))
    log.info("resumed the %s cost model from %s", name, path)
    return True


def make_strategy(
    search: SearchConfig,
    *,
    cost_model: str = "pam",
    adapt_every: int | None = None,
    log: Any = None,
    features: Any = None,
    pipeline: Any = None,
    replays: Any = None,
    loggers: Any = None,
) -> Any:
    """DraftVerifySearch with PSA on device row `search.psa`, or MetaSchedule's evolutionary search.

    `cost_model` is the verifier's `--cost-model` name and `adapt_every` how often MoA adapts: an unset
    `search.verify_gate` turns the gate on for a pretrained verifier that does not adapt every round
    (`resolve_verify_gate`). A pretrained PAM ranked the schedules a run measures on a new operator
    worse than PSA; a verifier that starts from nothing is not asked before it has data anyway.

    `search.population` defaults to 512 for both draft-then-verify (published: 1536) and
    MetaSchedule's evolutionary search; the other knobs concern draft-then-verify only. `features` (the
    run's FeatureCache) and `pipeline` (a `bridge.pipeline.Pipeline`, used when `search.pipeline`)
    go to draft-then-verify, and `loggers` (the run's MetaSchedule logger of each task, by name) for
    its first drafts' own contexts; `replays` (the run's `data.replay.ReplayMemo`) to both.
    """
    from bridge.draft_verify import DraftVerifySearch
    from bridge.search import ResumableEvolutionarySearch

    if search.psa is None:
        return ResumableEvolutionarySearch(log=log, replays=replays, population_size=search.population or 512)
    return DraftVerifySearch.from_config(
        resolve_verify_gate(search, cost_model, adapt_every),
        log=log,
        features=features,
        pipeline=pipeline if search.pipeline else None,
        replays=replays,
        loggers=loggers,
    )
