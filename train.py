"""Train and evaluate the cost models on feature shards (LightningCLI: fit, validate, test).

    python train.py fit  --config pam --data.shards runs/shards/llvm-sapphirerapids-2c
    python train.py test --config pam --data.shards ... --ckpt_path runs/pam/version_0/checkpoints/last.ckpt

`--config` takes a YAML file or the name of a packaged config (pam, mlp, moa, finetune: the files
in pruner_lightning/configs/; `configs/pam.yaml` also finds it). Finetune (weights AND
normalization of a pretrained checkpoint): `--config finetune --model.init_from PRETRAINED.ckpt`.
See docs/training.md for GPU, bf16, DDP, multi-node and W&B.

Each run writes into its own folder (`runs/<name>/version_N` with the CSV logger): config.yaml,
the logger's metrics, checkpoints/, and after `fit` training_curve.png; `fit` ends by printing the
best validation score and the path of its checkpoint. There is no `predict` subcommand: scoring
schedules is the tuning side's job (bridge/, tune.py), and `python -m bridge.evaluate` scores an
exported model on shards.
"""

from __future__ import annotations

import sys

from jsonargparse import lazy_instance
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.loggers import CSVLogger

from data.datamodule import ShardDataModule, SplitError
from data.shards import ShardError
from pruner_lightning.config_files import resolve_config
from pruner_lightning.run_outputs import CURVE_FILE, RunConfig, TrainingCurve
from pruner_models.module import CostModelModule, NonFiniteLossError


class CLI(LightningCLI):
    """LightningCLI with two checkpoints and early stopping on one validation ranking metric.

    `checkpoint` keeps the best epoch by `checkpoint.monitor` (best-epoch=E.ckpt; early stopping
    follows the same metric and mode through links); `last_checkpoint` rewrites last.ckpt after
    every epoch, to resume an interrupted run with `--ckpt_path .../last.ckpt` (Lightning 2.6's
    `save_last` only writes when the best checkpoint changes).
    """

    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        """LightningCLI's subcommands without `predict` (the DataModule has no predict data)."""
        commands = dict(LightningCLI.subcommands())
        commands.pop("predict")
        return commands

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.add_lightning_class_args(ModelCheckpoint, "last_checkpoint")
        parser.add_lightning_class_args(EarlyStopping, "early_stopping")
        parser.set_defaults(
            {
                "checkpoint.monitor": "val_pairwise_acc",
                "checkpoint.mode": "max",
                "checkpoint.filename": "best-{epoch}",
                "last_checkpoint.monitor": None,
                "last_checkpoint.filename": "last",
                "last_checkpoint.enable_version_counter": False,
                "early_stopping.patience": 10,
            }
        )
        # One flag picks the metric for both: --checkpoint.monitor val_peak@1
        parser.link_arguments("checkpoint.monitor", "early_stopping.monitor")
        parser.link_arguments("checkpoint.mode", "early_stopping.mode")
        # --checkpoint.dirpath places last.ckpt next to the best checkpoint
        parser.link_arguments("checkpoint.dirpath", "last_checkpoint.dirpath")

    def after_fit(self) -> None:
        """Print the best validation score and its checkpoint; write training_curve.png in the run folder."""
        trainer = self.trainer
        best = next(c for c in trainer.callbacks if isinstance(c, ModelCheckpoint) and c.monitor is not None)
        curve = next(c for c in trainer.callbacks if isinstance(c, TrainingCurve))
        run = next((c.run_dir for c in trainer.callbacks if isinstance(c, RunConfig)), None)
        if not trainer.is_global_zero:
            return
        if best.best_model_score is None:
            print(f"no {best.monitor} was logged, so no best checkpoint was kept")
        else:
            print(f"best {best.monitor}: {float(best.best_model_score):.4f}  checkpoint: {best.best_model_path}")
        if run is not None:
            print(f"training curve: {curve.write(run / CURVE_FILE, best.monitor, best.mode)}")


def _resolve_configs(args: list[str]) -> list[str]:
    """`args` with every `--config VALUE` / `--config=VALUE` resolved by `resolve_config`."""
    out = list(args)
    for i, arg in enumerate(out):
        if arg == "--config" and i + 1 < len(out):
            out[i + 1] = resolve_config(out[i + 1])
        elif arg.startswith("--config="):
            out[i] = "--config=" + resolve_config(arg[len("--config=") :])
    return out


def main(args: list[str] | None = None, run: bool = True) -> CLI:
    """Run the CLI (`args` None reads sys.argv); `run=False` only parses and instantiates."""
    return CLI(
        CostModelModule,
        ShardDataModule,
        subclass_mode_model=True,
        # without a logger a run's folder is runs/<subcommand>/version_N (pruner_lightning.run_outputs)
        trainer_defaults={
            "logger": lazy_instance(CSVLogger, save_dir="runs"),
            "default_root_dir": "runs",
            "callbacks": [TrainingCurve()],
        },
        save_config_callback=RunConfig,
        save_config_kwargs={"overwrite": True},  # a resumed W&B run (same run id) saves its config again
        args=_resolve_configs(sys.argv[1:] if args is None else args),
        run=run,
    )


if __name__ == "__main__":
    try:
        main()
    except (NonFiniteLossError, ShardError, SplitError) as err:  # bad data or a diverged fit: one clear line, exit 1
        sys.exit(f"error: {err}")
