"""What one train.py run writes into its own folder besides the logger's files: config.yaml and
training_curve.png.

The run folder is the one Lightning's `ModelCheckpoint` derives from the first logger
(`save_dir/name/version`: `runs/pam/version_3` for the CSV logger, `save_dir/project/run_id` for
W&B), so the config, the curve, the metrics and the checkpoints of a run sit together. A run
without a logger gets a fresh `default_root_dir/<stage>/version_N`. LightningCLI's own
`SaveConfigCallback` writes to `trainer.log_dir` instead, which is the shared `save_dir` for W&B
and `default_root_dir` without a logger, so every such run overwrote one `runs/config.yaml`.
"""

from __future__ import annotations

import math
from pathlib import Path

from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.cli import SaveConfigCallback

from data.atomic import atomic_path

__all__ = ["RunConfig", "TrainingCurve", "run_directory"]

CURVE_FILE = "training_curve.png"
_LOSSES = ("train_loss", "val_loss")
_RANKING = ("val_pairwise_acc", "val_peak@1", "val_peak@5")


def run_directory(trainer: Trainer, stage: str) -> Path:
    """The folder of this run (module docstring); call it on rank zero only (it may list folders)."""
    if trainer.loggers:
        logger = trainer.loggers[0]
        version = logger.version
        version = version if isinstance(version, str) else f"version_{version}"
        return Path(logger.save_dir or trainer.default_root_dir) / str(logger.name) / version
    base = Path(trainer.default_root_dir) / str(getattr(stage, "value", stage))  # TrainerFn.TESTING -> "test"
    n = 0
    while (base / f"version_{n}").exists():
        n += 1
    return base / f"version_{n}"


class RunConfig(SaveConfigCallback):
    """LightningCLI's config saving, into the run's own folder (`run_directory`).

    Attributes:
        run_dir: that folder, on every rank, once the trainer is set up (None before).
    """

    run_dir: Path | None = None

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if self.already_saved:
            return
        chosen = str(run_directory(trainer, stage)) if trainer.is_global_zero else None
        self.run_dir = Path(trainer.strategy.broadcast(chosen))
        if trainer.is_global_zero:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self.parser.save(
                self.config,
                str(self.run_dir / self.config_filename),
                skip_none=False,
                overwrite=self.overwrite,
                multifile=self.multifile,
            )
            self.save_config(trainer, pl_module, stage)
        self.already_saved = trainer.strategy.broadcast(True)


class TrainingCurve(Callback):
    """Collects the per-epoch losses and validation ranking metrics of a fit and plots them.

    Attributes:
        rows: one dict per finished training epoch: "epoch" and whichever of train_loss, val_loss,
            val_pairwise_acc, val_peak@1, val_peak@5 were logged (floats).
    """

    def __init__(self) -> None:
        self.rows: list[dict[str, float]] = []

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        metrics = trainer.callback_metrics
        row = {"epoch": float(trainer.current_epoch)}
        for name in (*_LOSSES, *_RANKING):
            value = metrics.get(f"{name}_epoch", metrics.get(name))
            if value is not None:
                row[name] = float(value)
        self.rows.append(row)

    def write(self, path: str | Path, monitor: str | None = None, mode: str = "max") -> Path:
        """Plot losses (left) and validation ranking metrics (right) against the epoch, atomically.

        Args:
            path: the PNG to write.
            monitor: the metric that picked the best checkpoint; its best epoch gets a marker line.
            mode: "max" or "min", the direction in which `monitor` improves.
        """
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
        for ax, names in ((left, _LOSSES), (right, _RANKING)):
            for name in names:
                points = [(r["epoch"], r[name]) for r in self.rows if name in r and math.isfinite(r[name])]
                if points:
                    ax.plot(*zip(*points), marker="o", markersize=3, label=name)
            ax.set_xlabel("epoch")
            ax.grid(alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend()
        left.set_ylabel("loss")
        right.set_ylabel("validation metric")
        scored = [r for r in self.rows if monitor in r and math.isfinite(r[monitor])]
        if scored:
            best = (max if mode == "max" else min)(scored, key=lambda r: r[monitor])
            ax = left if monitor in _LOSSES else right
            ax.axvline(best["epoch"], color="grey", linestyle="--", linewidth=1)
            ax.set_title(f"best {monitor} {best[monitor]:.4f} at epoch {int(best['epoch'])}", fontsize=9)
        fig.tight_layout()
        path = Path(path)
        with atomic_path(path, suffix=".png") as tmp:
            fig.savefig(tmp, dpi=110)
        plt.close(fig)
        return path
