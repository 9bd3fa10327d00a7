"""Optional Weights & Biases logging of a tuning run, like train.py's: one W&B run per tune.

`WandbRun` logs each measured batch's curve row (trials, estimated latency, the task's best, search
statistics) as a step, and the final summary (summary.json's scalars and the tuning-curve PNG). With
no API key configured (no WANDB_API_KEY, no `wandb login`), it runs offline into `<out>/wandb`, so a
run never waits on the network; `wandb sync` uploads it later.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["WandbRun"]


def _mode() -> str:
    if os.environ.get("WANDB_MODE"):
        return os.environ["WANDB_MODE"]
    if os.environ.get("WANDB_API_KEY"):
        return "online"
    netrc = Path.home() / ".netrc"
    logged_in = netrc.exists() and "api.wandb.ai" in netrc.read_text(errors="replace")
    return "online" if logged_in else "offline"


class WandbRun:
    """A W&B run of one tuning run.

    Args:
        out: the tuning output dir (W&B files go to `<out>/wandb`).
        project: W&B project name.
        config: the run's configuration (flat dict of plain values).
        name: run name (default: W&B's).
    """

    def __init__(self, out: str | os.PathLike, project: str, config: Mapping[str, Any], name: str | None = None):
        import wandb

        self.mode = _mode()
        self.run = wandb.init(project=project, dir=str(out), config=dict(config), name=name, mode=self.mode)

    def log_round(self, row: Mapping[str, Any]) -> None:
        """One measured batch, stepped by total trials; non-finite values are left out."""
        values = {
            f"tune/{k}": float(v)
            for k, v in row.items()
            if k != "task" and isinstance(v, (int, float)) and math.isfinite(float(v))
        }
        self.run.log(values, step=int(row["total_trials"]))

    def finish(self, summary: Mapping[str, Any], plot: str | os.PathLike | None = None) -> None:
        """Write the summary's scalars (and the curve image) and close the run."""
        import wandb

        for key, value in summary.items():
            if isinstance(value, (int, float, str)) and value is not None:
                self.run.summary[key] = value
        if plot is not None and Path(plot).exists():
            self.run.log({"tune/curve": wandb.Image(str(plot))})
        self.run.finish()
