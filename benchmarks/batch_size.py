"""Default batch size and learning-rate schedule of PAM, chosen by measured time to best validation score.

For every (batch size, schedule) and seed, the model of a packaged training config (default `pam`:
the published PAM, LambdaRank, Adam 7e-4, weight decay 1e-6, clip 0.5; the config has no LR
scheduler, the learning rate is constant) trains with a real Lightning Trainer on the
ShardDataModule's train split (the config's split and fractions, `--seeds` as data and training
seed) for `--seconds` of TRAINING time, validating every `--val-every` epochs, so every batch
size validates after the same numbers of records. A callback records at each validation the
training seconds (wall time since fit start minus the time spent validating), the wall seconds
and val_pairwise_acc / val_peak@1. A schedule scales the config's learning rate by the batch size
relative to the config's (512): `none` (as is), `sqrt` (lr * sqrt(b / 512)), `linear` (lr * b / 512).
Each batch size first trains `--warmup-steps` untimed steps (CUDA context, kernels); `--budget`
starts no fit that may not end within that many seconds of the start (the JSON says which it skipped).

    python benchmarks/batch_size.py --shards runs/h100_shards --batch-sizes 256 512 --seconds 5
    python benchmarks/batch_size.py --shards runs/h100_shards --accelerator gpu --seeds 0 1 --seconds 15 \\
        --batch-sizes 256 512 1024 2048 4096 --lr-scaling none sqrt --val-every 2 --json runs/batch_size.json

Per config, the seeds' validation curves are averaged point by point (validation k of every seed
comes after the same number of epochs), cut to the shortest seed. Reported: the best mean val
pairwise accuracy (and the std of the seeds' own bests), val peak@1 there and its own best, the
training and wall seconds to that best, the training seconds to reach within `--tolerance` of the
best mean val pairwise of ALL configs ("never" if it does not), and training records/s. With
`--smooth K` the mean val curves are first replaced by trailing means of their last K validations.

Winner: the config that reaches (best of all configs - tolerance) in the fewest training seconds,
ties to the higher best; a config with a diverged seed (NaN/inf loss) cannot win. Validation time
is left out of the ranking (it depends on --val-every), but shown as wall seconds.
"""

from __future__ import annotations

import json
import logging
import math
import sys
import time
import warnings
from importlib import import_module
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import lightning as L
import numpy as np
import torch
import yaml
from jsonargparse import Namespace
from rich.console import Console
from rich.table import Table

from benchmarks.cli import doc_parser
from data.atomic import atomic_write_text
from data.datamodule import ShardDataModule
from pruner_lightning.config_files import resolve_config
from pruner_models.module import NonFiniteLossError

SCALINGS = {"none": lambda ratio: 1.0, "sqrt": math.sqrt, "linear": lambda ratio: ratio}
METRICS = {"pairwise": "val_pairwise_acc", "peak1": "val_peak@1"}
WALL_CAP = 3.0
"""A fit also stops after WALL_CAP * --seconds of wall time (validation-bound runs)."""


class ValidationClock(L.Callback):
    """At every validation: training seconds (validation excluded), wall seconds, training records
    and the val metrics. Stops the fit after `seconds` of training time."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.history: list[dict] = []
        self.records = 0
        self.train_s = 0.0

    @staticmethod
    def _now(pl_module: L.LightningModule) -> float:
        if pl_module.device.type == "cuda":
            torch.cuda.synchronize(pl_module.device)
        return time.perf_counter()

    def _train_seconds(self, now: float) -> float:
        return now - self.start - self.validating

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.start, self.validating = self._now(pl_module), 0.0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.records += len(batch["label"]) * trainer.world_size
        now = time.perf_counter()  # no sync: the stop may come a few queued steps late
        if self._train_seconds(now) >= self.seconds or now - self.start >= WALL_CAP * self.seconds:
            trainer.should_stop = True

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.paused = self._now(pl_module)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        metrics = {key: float(trainer.callback_metrics[name]) for key, name in METRICS.items()}
        now = self._now(pl_module)
        self.history.append(
            {
                "epoch": trainer.current_epoch,
                "step": trainer.global_step,
                "records": self.records,
                "train_s": self._train_seconds(self.paused),
                "wall_s": now - self.start,
                **metrics,
            }
        )
        self.validating += now - self.paused

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.train_s = self._train_seconds(self._now(pl_module))


def fit(args: Namespace, config: dict, batch_size: int, schedule: str, seed: int, **trainer_args) -> dict:
    """One fit of `config`'s model on `args.shards` at this batch size, schedule and seed: its record."""
    data = {k: v for k, v in config["data"].items() if k != "shards"}
    lr_factor = SCALINGS[schedule](batch_size / data["batch_size"])
    data.update(shards=args.shards, batch_size=batch_size, seed=seed, data_on_device=args.data_on_device)
    module_path, name = config["model"]["class_path"].rsplit(".", 1)
    init = dict(config["model"]["init_args"])
    init["lr"] *= lr_factor
    L.seed_everything(seed, verbose=False)
    dm = ShardDataModule(**data)
    model = getattr(import_module(module_path), name)(**init)
    clock = ValidationClock(args.seconds)
    trainer = L.Trainer(
        **{"max_epochs": -1, "check_val_every_n_epoch": args.val_every, **trainer_args},
        accelerator=args.accelerator,
        devices=args.devices,
        precision=args.precision,
        gradient_clip_val=config["trainer"].get("gradient_clip_val"),
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[clock],
    )
    diverged = False
    try:
        trainer.fit(model, dm)
    except NonFiniteLossError:
        diverged = True
    return {
        "batch_size": batch_size,
        "schedule": schedule,
        "lr": init["lr"],
        "seed": seed,
        "diverged": diverged,
        "train_records": len(dm.splits["train"]),
        "val_records": len(dm.splits["val"]),
        "train_s": clock.train_s,
        "records_per_s": clock.records / clock.train_s if clock.train_s else float("nan"),
        "history": clock.history,
    }


def first(values: np.ndarray, target: float) -> int | None:
    """Index of the first value >= target, or None."""
    hits = np.flatnonzero(values >= target)
    return int(hits[0]) if len(hits) else None


def summarize(runs: list[dict], tolerance: float, smooth: int = 1) -> tuple[dict[str, dict], float, str | None]:
    """Per config ("b<batch> <schedule>"): the seed-mean curve's numbers; the target; the winner.

    The mean val curves are trailing means over the last `smooth` validations (1: as measured).
    """
    groups: dict[str, list[dict]] = {}
    for run in runs:
        groups.setdefault(f"b{run['batch_size']} {run['schedule']}", []).append(run)
    rows = {}
    for key, group in groups.items():
        n = min(len(run["history"]) for run in group)
        curve = {
            f: np.mean([[h[f] for h in run["history"][:n]] for run in group], axis=0).reshape(-1)
            for f in ("train_s", "wall_s", "pairwise", "peak1")
        }
        for f in ("pairwise", "peak1") if smooth > 1 else ():
            curve[f] = np.array([curve[f][max(0, i - smooth + 1) : i + 1].mean() for i in range(n)])
        seed_bests = [max((h["pairwise"] for h in run["history"]), default=float("nan")) for run in group]
        best = int(np.argmax(curve["pairwise"])) if n else None
        rows[key] = {
            "batch_size": group[0]["batch_size"],
            "schedule": group[0]["schedule"],
            "lr": group[0]["lr"],
            "seeds": len(group),
            "diverged": sum(run["diverged"] for run in group),
            "validations": n,
            "best_pairwise": float(curve["pairwise"][best]) if n else float("nan"),
            "best_pairwise_seed_std": float(np.std(seed_bests)),
            "peak1_at_best": float(curve["peak1"][best]) if n else float("nan"),
            "best_peak1": float(curve["peak1"].max()) if n else float("nan"),
            "train_s_to_best": float(curve["train_s"][best]) if n else None,
            "wall_s_to_best": float(curve["wall_s"][best]) if n else None,
            "records_per_s": float(np.mean([run["records_per_s"] for run in group])),
            "curve": {f: values.tolist() for f, values in curve.items()},
        }
    target = max((r["best_pairwise"] for r in rows.values() if r["validations"]), default=float("nan")) - tolerance
    for row in rows.values():
        hit = first(np.asarray(row["curve"]["pairwise"]), target)
        row["train_s_to_target"] = None if hit is None else row["curve"]["train_s"][hit]
        row["wall_s_to_target"] = None if hit is None else row["curve"]["wall_s"][hit]
    eligible = [k for k, r in rows.items() if r["train_s_to_target"] is not None and not r["diverged"]]
    winner = min(eligible, key=lambda k: (rows[k]["train_s_to_target"], -rows[k]["best_pairwise"]), default=None)
    return rows, target, winner


def report(rows: dict[str, dict], target: float, winner: str | None, args: Namespace, title: str) -> None:
    table = Table(title=title)
    columns = "config|lr|best val pairwise|peak@1 there|best peak@1|train s to best|wall s to best".split("|")
    for column in [*columns, f"train s to >= {target:.3f}", "records/s", "vals", "diverged"]:
        table.add_column(column, justify="left" if column == "config" else "right")
    for key, r in rows.items():
        std = f" ± {r['best_pairwise_seed_std']:.3f}" if r["seeds"] > 1 else ""
        peaks = [f"{r[k]:.4f}" for k in ("peak1_at_best", "best_peak1")]
        secs = [
            "never" if r[k] is None else f"{r[k]:.2f}"
            for k in ("train_s_to_best", "wall_s_to_best", "train_s_to_target")
        ]
        counts = [f"{r['records_per_s']:,.0f}", str(r["validations"]), f"{r['diverged']}/{r['seeds']}"]
        name = ("* " if key == winner else "") + key
        table.add_row(name, f"{r['lr']:.2e}", f"{r['best_pairwise']:.4f}{std}", *peaks, *secs, *counts)
    console = Console(width=200)
    console.print(table)
    rule = (
        f"winner = fewest training seconds (validation excluded) for the seed-mean val pairwise (trailing mean of "
        f"{args.smooth} validation(s)) to reach the best of all configs minus {args.tolerance} = {target:.4f}; "
        "ties to the higher best; configs with a diverged seed excluded"
    )
    console.print(f"{rule}\n[bold]winner: {winner or 'none'}[/bold]")


def main(argv: list[str] | None = None) -> dict:
    """Run the sweep (`argv` None reads sys.argv); returns what --json gets."""
    parser = doc_parser(__doc__)
    parser.add_argument("--shards", required=True, help="shard folder or file (data.featurize output)")
    parser.add_argument("--config", default="pam", help="packaged training config (or a YAML file) of the model")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[256, 512, 1024, 2048, 4096])
    parser.add_argument("--lr-scaling", nargs="+", choices=list(SCALINGS), default=["none", "sqrt"])
    parser.add_argument("--seconds", type=float, default=20.0, help="training seconds per fit")
    parser.add_argument("--val-every", type=int, default=1, help="validate every N epochs")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--tolerance", type=float, default=0.005, help="val pairwise margin of the winner rule")
    parser.add_argument("--smooth", type=int, default=1, help="trailing mean over N validations of the mean curves")
    parser.add_argument("--budget", type=float, default=None, help="total seconds: start no fit that may not end in it")
    parser.add_argument("--warmup-steps", type=int, default=3, help="untimed steps per batch size first (0: none)")
    parser.add_argument("--accelerator", default="auto", help="cpu, gpu or auto")
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--precision", default=None, help="default: bf16-mixed on GPU, 32-true on CPU")
    parser.add_argument("--data-on-device", choices=["auto", "yes", "no"], default="auto", help="auto: yes on GPU")
    parser.add_argument("--json", default=None, help="write the results here (rewritten after every fit)")
    args = parser.parse_args(argv)
    gpu = args.accelerator == "gpu" or (args.accelerator == "auto" and torch.cuda.is_available())
    args.precision = args.precision or ("bf16-mixed" if gpu else "32-true")
    args.data_on_device = args.data_on_device == "yes" or (args.data_on_device == "auto" and gpu)
    if gpu:
        torch.backends.cuda.matmul.allow_tf32 = True
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", ".*(logging interval|does not have many workers|max_epochs=-1).*")
    config = yaml.safe_load(Path(resolve_config(args.config)).read_text())
    device = torch.cuda.get_device_name() if gpu else f"CPU ({torch.get_num_threads()} threads)"

    start, longest = time.perf_counter(), 0.0
    for batch_size in args.batch_sizes if args.warmup_steps else []:
        fit(args, config, batch_size, "none", 0, max_steps=args.warmup_steps, limit_val_batches=0)
    out = {"device": device, "args": vars(args), "runs": [], "skipped": []}
    for seed in args.seeds:  # seeds outermost: a cut-short sweep still has every config of the first seeds
        for schedule in args.lr_scaling:
            for batch_size in args.batch_sizes:
                if args.budget and time.perf_counter() - start + 1.5 * longest > args.budget:
                    out["skipped"].append(f"b{batch_size} {schedule} seed {seed}")
                    continue
                fit_start = time.perf_counter()
                run = fit(args, config, batch_size, schedule, seed)
                longest = max(longest, time.perf_counter() - fit_start)
                best = max(run["history"], key=lambda h: h["pairwise"], default=None)
                print(
                    f"b{batch_size} {schedule} seed {seed}: lr {run['lr']:.2e}, {len(run['history'])} validations, "
                    + (f"best pairwise {best['pairwise']:.4f} at {best['train_s']:.2f} s, " if best else "")
                    + f"{run['records_per_s']:,.0f} records/s"
                    + (", DIVERGED" if run["diverged"] else ""),
                    flush=True,
                )
                out["runs"].append(run)
                rows, out["target_pairwise"], out["winner"] = summarize(out["runs"], args.tolerance, args.smooth)
                out["summary"] = rows
                if args.json:
                    atomic_write_text(args.json, json.dumps(out, indent=1))
    first_run = out["runs"][0]
    title = (
        f"PAM batch size x LR schedule: {device}, {args.precision}, {first_run['train_records']} train / "
        f"{first_run['val_records']} val records, {args.seconds:g} training s per fit, seeds {args.seeds}"
    )
    report(out["summary"], out["target_pairwise"], out["winner"], args, title)
    if out["skipped"]:
        print(f"--budget {args.budget:g} s: skipped {len(out['skipped'])} fits: {', '.join(out['skipped'])}")
    return out


if __name__ == "__main__":
    main()
