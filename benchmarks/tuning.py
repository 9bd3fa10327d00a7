"""Draft-then-verify (PSA drafts, PAM verifies) versus MetaSchedule's default (evolution + XGBoost).

Same tasks, same trial budget, same seed, one process: a 3x3 conv2d and a 1x1 conv2d of ResNet-50
(stage 1, batch 1) and a dense layer of BERT-base (sequence 128), tuned together as one workload
(weights 1, MetaSchedule's gradient task scheduler) by each method in turn, each in a fresh work
dir. Reports the best estimated latency (sum of the tasks' best latencies) at several trial budgets,
the search time, and the search time each method needs to reach the baseline's final latency;
writes the curves (CSV) and a plot (PNG).

    python benchmarks/tuning.py --target nvidia/nvidia-h100 --psa h100 --trials 150 --deadline 480 --out runs/bench_tuning
    python benchmarks/tuning.py --target '{"kind": "llvm", "mcpu": "sapphirerapids", "num-cores": 2}' --psa a100 \\
        --trials 24 --population 128 --potential 32 --deadline 420 --out runs/bench_tuning_cpu

`--deadline` (seconds, for the whole run) is split evenly between the methods: a method stops
starting new batches at its share, so the script ends in time (the GPU machine allows 10 minutes a
command). `--checkpoint ARTIFACT` verifies with a pretrained PAM (pam-siamese-update) instead of
training PAM online from scratch (pam).
"""

from __future__ import annotations

import argparse
import csv
import math
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bridge.config import CostModelConfig, MeasureConfig, SearchConfig, TuneConfig
from bridge.report import plot_curves
from bridge.tuning import tune_tasks
from data.zoo import operator_task

TASKS = (
    "conv2d:1,56,56,64,64,3,1,1",  # ResNet-50 stage 1, 3x3
    "conv2d:1,56,56,64,256,1,1,0",  # ResNet-50 stage 1, 1x1 expansion
    "dense:128,768,768",  # BERT-base attention projection, sequence 128
)
FIELDS = (
    "method",
    "total_trials",
    "elapsed_s",
    "estimated_ms",
    "draft_scored",
    "verify_scored",
    "draft_s",
    "verify_s",
    "build_s",
    "run_s",
)


def first_time_to(rows: list[dict], latency_ms: float) -> float:
    """Search seconds at which a curve first reaches `latency_ms` (inf if never)."""
    return next((r["elapsed_s"] for r in rows if r["estimated_ms"] <= latency_ms * (1 + 1e-9)), math.inf)


def best_at(rows: list[dict], trials: int) -> float:
    """Best estimated latency (ms) after `trials` trials (inf before every task has a valid one)."""
    return min((r["estimated_ms"] for r in rows if r["total_trials"] <= trials), default=math.inf)


def main(argv: list[str] | None = None) -> dict[str, list[dict]]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", default="nvidia/nvidia-h100")
    p.add_argument("--psa", default="h100", help="PSA device row")
    p.add_argument("--checkpoint", default=None, help="pretrained PAM artifact: verify with pam-siamese-update")
    p.add_argument("--tasks", nargs="+", default=list(TASKS), help="operator specs (data.zoo.OPERATORS)")
    p.add_argument("--trials", type=int, default=150, help="trial budget of each method (all tasks together)")
    p.add_argument("--trials-per-round", type=int, default=10)
    p.add_argument("--population", type=int, default=1536, help="draft population (published: 1536)")
    p.add_argument("--potential", type=int, default=512, help="potential space (published: 512)")
    p.add_argument("--epochs", type=int, default=50, help="PAM online-training epochs")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--deadline", type=float, default=480.0, help="seconds for the whole run (split between methods)")
    p.add_argument("--min-repeat-ms", type=int, default=100)
    p.add_argument("--out", default="runs/bench_tuning")
    args = p.parse_args(argv)

    start = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tasks = [operator_task(spec) for spec in args.tasks]
    measure = MeasureConfig(number=3, repeat=1, min_repeat_ms=args.min_repeat_ms)
    pruner_mode = "pam-siamese-update" if args.checkpoint else "pam"
    methods = {
        "MetaSchedule (evolution + XGBoost)": dict(
            cost_model=CostModelConfig(name="xgb", epochs=args.epochs, seed=args.seed), search=SearchConfig()
        ),
        f"Pruner (PSA draft + {pruner_mode})": dict(
            cost_model=CostModelConfig(
                name=pruner_mode, checkpoint=args.checkpoint, epochs=args.epochs, seed=args.seed
            ),
            search=SearchConfig(psa=args.psa, population=args.population, potential=args.potential),
        ),
    }
    curves: dict[str, list[dict]] = {}
    for i, (name, method) in enumerate(methods.items()):
        share = (args.deadline - (time.perf_counter() - start)) / (len(methods) - i)
        work = out / f"work_{i}"
        if work.exists():
            shutil.rmtree(work)
        print(f"== {name}: {args.trials} trials, deadline {share:.0f} s", flush=True)
        config = TuneConfig(
            out=str(work),
            trials=args.trials,
            trials_per_round=args.trials_per_round,
            seed=args.seed,
            deadline=max(share, 1.0),
        )
        result = tune_tasks(tasks, args.target, config, measure=measure, progress=False, **method)
        curves[name] = result.rows
    with open(out / "tuning_curves.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS, extrasaction="ignore")
        writer.writeheader()
        for name, rows in curves.items():
            writer.writerows({**r, "method": name} for r in rows)
    plot_curves(curves, out / "tuning_curves.png")

    baseline_name, baseline = next(iter(curves.items()))
    baseline_final = min((r["estimated_ms"] for r in baseline), default=math.inf)
    budgets = sorted({max(1, args.trials * q // 4) for q in (1, 2, 3, 4)})
    print(f"\nbest estimated latency (ms) by trials; tasks: {', '.join(args.tasks)}; target {args.target}")
    print(f"{'method':<40}" + "".join(f"{b:>9}" for b in budgets) + f"{'trials':>8}{'search s':>10}{'to base':>9}")
    for name, rows in curves.items():
        reached = first_time_to(rows, baseline_final)
        total = rows[-1]["elapsed_s"] if rows else math.nan
        trials = int(rows[-1]["total_trials"]) if rows else 0
        line = f"{name:<40}" + "".join(f"{best_at(rows, b):>9.4f}" for b in budgets)
        print(line + f"{trials:>8}{total:>10.1f}{reached:>9.1f}")
    for name, rows in curves.items():
        draft = sum(r["draft_scored"] for r in rows if math.isfinite(r["draft_scored"]))
        verify = sum(r["verify_scored"] for r in rows if math.isfinite(r["verify_scored"]))
        seconds = {
            k: sum(r[k] for r in rows if math.isfinite(r[k])) for k in ("draft_s", "verify_s", "build_s", "run_s")
        }
        print(
            f"{name}: scored draft {int(draft)} / verify {int(verify)}; seconds drafting {seconds['draft_s']:.1f}, "
            f"verifying {seconds['verify_s']:.1f}, building {seconds['build_s']:.1f}, running {seconds['run_s']:.1f}"
        )
    pruner_rows = curves[list(curves)[-1]]
    reach = first_time_to(pruner_rows, baseline_final)
    base_time = baseline[-1]["elapsed_s"] if baseline else math.nan
    print(
        f"{baseline_name} final: {baseline_final:.4f} ms in {base_time:.1f} s; Pruner reaches it after "
        + (
            f"{reach:.1f} s ({base_time / reach:.2f}x less search time)"
            if math.isfinite(reach)
            else "- (not within its budget)"
        )
    )
    print(
        f"curves: {out / 'tuning_curves.csv'}, {out / 'tuning_curves.png'}; total {time.perf_counter() - start:.0f} s"
    )
    return curves


if __name__ == "__main__":
    main()
