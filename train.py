"""Train and evaluate the cost models on feature shards (LightningCLI: fit, validate, test).

    python train.py fit  --config configs/pam.yaml --data.shards runs/shards/llvm-sapphirerapids-2c
    python train.py test --config configs/pam.yaml --data.shards ... --ckpt_path runs/pam/version_0/checkpoints/last.ckpt

Finetune (weights AND normalization of a pretrained checkpoint): `--config configs/finetune.yaml
--model.init_from PRETRAINED.ckpt`. See docs/training.md for GPU, bf16, DDP, multi-node and W&B.
"""

from __future__ import annotations

import sys

from jsonargparse import lazy_instance
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.loggers import CSVLogger

from data.datamodule import ShardDataModule, SplitError
from data.shards import ShardError
from pruner_models.module import CostModelModule, NonFiniteLossError


class CLI(LightningCLI):
    """LightningCLI with two checkpoints and early stopping on one validation ranking metric.

    `checkpoint` keeps the best epoch by `checkpoint.monitor` (best-epoch=E.ckpt; early stopping
    follows the same metric and mode through links); `last_checkpoint` rewrites last.ckpt after
    every epoch, to resume an interrupted run with `--ckpt_path .../last.ckpt` (Lightning 2.6's
    `save_last` only writes when the best checkpoint changes).
    """

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


def main(args: list[str] | None = None, run: bool = True) -> CLI:
    """Run the CLI (`args` None reads sys.argv); `run=False` only parses and instantiates."""
    return CLI(
        CostModelModule,
        ShardDataModule,
        subclass_mode_model=True,
        # runs/ also catches checkpoints and config.yaml of runs with --trainer.logger false
        trainer_defaults={"logger": lazy_instance(CSVLogger, save_dir="runs"), "default_root_dir": "runs"},
        save_config_kwargs={"overwrite": True},
        args=args,
        run=run,
    )


if __name__ == "__main__":
    try:
        main()
    except (NonFiniteLossError, ShardError, SplitError) as err:  # bad data or a diverged fit: one clear line, exit 1
        sys.exit(f"error: {err}")
