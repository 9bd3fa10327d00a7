"""Reports of a tuning run: the per-task table, summary.json and the curve plots.

* `print_report`: rich table of the tasks (full names: the column wraps, never truncates), the
  estimated total with how many of the network's tasks it covers, the search time, and the share
  of the run in which the device sat idle, split by where it fell.
* `summary`/`write_summary`: the same as JSON (summary.json in the output dir), plus whatever the
  caller measured at network level (end-to-end, untuned baseline, torch eager).
* `plot_tuning`: the run's curve: estimated total latency vs trials and each task's best latency vs
  trials, one line per task from its first valid measurement on; a single point is drawn as a
  visible marker. Titled with the workload, target and cost model.
* `plot_curves`: several runs' estimated-total curves in one figure (benchmarks/tuning.py).
* `launch_floor_note`: a warning for CUDA tasks that ended near the host's launch rate, where TVM's
  time evaluator reads the launches, not the kernel.
All files are written atomically (data.atomic).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from data.atomic import atomic_path, atomic_write_text

__all__ = [
    "launch_floor_note",
    "plot_curves",
    "plot_tuning",
    "print_report",
    "reread_summary",
    "reread_total",
    "summary",
    "write_summary",
]

NEAR_FLOOR_US = 5.0
"""A CUDA task whose best reading is under this many microseconds ended near the host's launch rate:
TVM's time evaluator read a kernel of 64 adds at 3.5-3.8 us on an idle H200 machine and at 7-9 us on a
busy one (docs/benchmarks.md, "The host's launch floor"). The threshold is the idle floor's: on a busy
host, kernels read up to 9 us may be near it too, and get no note."""


FIRST_ROUNDS_SHARE = 0.5
"""A run of several tasks whose first rounds took more than this share of it gets a note: its tasks had
few rounds after their first (ResNet-18 in 300 s on one H200, Pruner online and MoA: 248-287 s of
about 350, then 2-9 rounds for 19 tasks; docs/benchmarks.md, "MoA on the whole of ResNet-18")."""


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None or not math.isfinite(seconds) else seconds * 1e3


def coverage_note(tuned: int, total: int | None) -> str:
    """Which share of the workload the estimated total covers."""
    if total is None or total == tuned:
        return f"sum over all {tuned} task(s) of weight x best latency"
    return (
        f"sum over the {tuned} tuned task(s) of the network's {total} only (weight x best latency); "
        "the untuned tasks are not in it, so it is below the end-to-end time"
    )


def launch_floor_note(result: Any, target_kind: str, timer: str) -> str | None:
    """A note when a CUDA run timed by the evaluator (`timer` "evaluator") has tasks whose best is
    under `NEAR_FLOOR_US`: their readings are mostly the host's launches, so two such kernels a few
    percent apart are not told apart, and `--timer graph` times them as CUDA graphs. None otherwise."""
    if target_kind != "cuda" or timer != "evaluator":
        return None
    near = [t.name for t in result.tasks if math.isfinite(t.best_s) and t.best_s * 1e6 < NEAR_FLOOR_US]
    if not near:
        return None
    return (
        f"{len(near)} of {len(result.tasks)} task(s) ended under {NEAR_FLOOR_US:g} us ({', '.join(near[:3])}"
        f"{', ...' if len(near) > 3 else ''}), near the host's launch rate: the time evaluator reads mostly "
        "the launches there, not the kernel (a kernel of 64 adds reads 3.5-9 us on an H200 machine). "
        "--timer graph times each candidate as a CUDA graph instead."
    )


def summary(result: Any, *, total_tasks: int | None = None, **context: Any) -> dict:
    """The run as a JSON-ready dict.

    Args:
        result: a `bridge.tuning.TuneResult`.
        total_tasks: tasks of the whole network (None: the tuned tasks are the whole workload).
        **context: further keys (workload, target, cost_model, end_to_end_ms, untuned_ms,
            torch_eager_ms, ...), written as given; non-finite floats become null.
    """
    est = result.estimated_s
    rows = [
        {
            "task": t.name,
            "weight": t.weight,
            "trials": t.trials,
            "best_latency_us": t.best_s * 1e6 if math.isfinite(t.best_s) else None,
            "gflops": t.gflops if math.isfinite(t.best_s) else None,
            "flops": t.flops,
        }
        for t in result.tasks
    ]
    clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in context.items()}
    return {
        **clean,
        "tasks": rows,
        "tasks_tuned": len(result.tasks),
        "tasks_in_workload": total_tasks if total_tasks is not None else len(result.tasks),
        "estimated_total_ms": _ms(est),
        "estimated_total_note": coverage_note(len(result.tasks), total_tasks),
        "total_trials": sum(t.trials for t in result.tasks),
        "search_s": result.search_s,
        "first_rounds_s": result.first_rounds_s if math.isfinite(result.first_rounds_s) else None,
        "device_idle": {k: (v if math.isfinite(v) else None) for k, v in result.device_idle.items()},
        "builds": {k: (v if math.isfinite(v) else None) for k, v in result.builds.items()},
        "host_cpu_busy": result.host_cpu_busy if math.isfinite(result.host_cpu_busy) else None,
        "skipped_database_lines": list(result.skipped_lines),
        "reread": reread_summary(result),
        "estimated_total_reread_ms": _ms(reread_total(result)),
        "reread_s": result.reread_s,
    }


def reread_summary(result: Any) -> dict:
    """Task -> its re-read (`bridge.reread.Reread`) in microseconds: `reported_us`, `reread_us`, `ratio`
    and `candidates_us` ([reported, re-read] a record); {} for a run that re-read nothing."""
    return {
        name: {
            "reported_us": r.reported_s * 1e6,
            "reread_us": r.reread_s * 1e6,
            "ratio": r.ratio,
            "candidates_us": [[a * 1e6, b * 1e6] for a, b in r.candidates],
        }
        for name, r in result.reread.items()
    }


def reread_total(result: Any) -> float:
    """`estimated_s` with every task's re-read final in place of its best reading; inf unless every
    task was re-read (a sum of re-read and run's readings would be on two scales)."""
    if not result.reread or any(t.name not in result.reread for t in result.tasks):
        return math.inf
    return float(sum(t.weight * result.reread[t.name].reread_s for t in result.tasks))


def write_summary(path: str | os.PathLike, data: Mapping[str, Any]) -> None:
    """Write `data` as indented JSON, atomically."""
    atomic_write_text(path, json.dumps(data, indent=2) + "\n")


def print_report(result: Any, console: Any, *, total_tasks: int | None = None) -> None:
    """Per-task table (task names never truncated), estimated total with its coverage, search time."""
    from rich.table import Table

    table = Table(title="tuned tasks")
    for column in ("task", "weight", "trials", "latency (us)", "GFLOPS", "weighted (us)"):
        if column == "task":
            table.add_column(column, justify="left", overflow="fold", no_wrap=False, min_width=12)
        else:
            table.add_column(column, justify="right", no_wrap=True)
    for t in result.tasks:
        finite = math.isfinite(t.best_s)
        table.add_row(
            t.name,
            f"{t.weight:g}",
            str(t.trials),
            f"{t.best_s * 1e6:.2f}" if finite else "n/a",
            f"{t.gflops:.1f}" if finite else "n/a",
            f"{t.weight * t.best_s * 1e6:.2f}" if finite else "n/a",
        )
    console.print(table)
    est = result.estimated_s
    note = coverage_note(len(result.tasks), total_tasks)
    console.print(
        f"estimated total latency: {est * 1e3:.4f} ms ({note})"
        if math.isfinite(est)
        else "estimated total latency: n/a (a task has no valid run)"
    )
    console.print(f"search time: {result.search_s:.1f} s over {sum(t.trials for t in result.tasks)} trials")
    from bridge.reread import ROUNDS

    for name, r in result.reread.items():
        console.print(
            f"re-read with the device quiet: {name} {r.reread_s * 1e6:.2f} us, the run's best reading "
            f"{r.reported_s * 1e6:.2f} us (x{r.ratio:.3f}; {len(r.candidates)} of its best records, {ROUNDS} rounds each)",
            soft_wrap=True,
            markup=False,
        )
    if result.reread and math.isfinite(total := reread_total(result)):
        console.print(
            f"estimated total latency, re-read: {total * 1e3:.4f} ms (the re-read took {result.reread_s:.1f} s)"
        )
    elif result.reread:
        console.print(f"the re-read took {result.reread_s:.1f} s; not every task was re-read (no total on its scale)")
    idle = result.device_idle
    if math.isfinite(idle["idle"]):
        console.print(
            f"device idle: {100 * idle['idle']:.0f}% of the run (before the first batch "
            f"{100 * idle['before_first']:.0f}%, waiting on drafts {100 * idle['drafts']:.0f}%, "
            f"the rest {100 * idle['other']:.0f}%)"
        )
    first, run = result.first_rounds_s, (result.rows[-1]["elapsed_s"] if result.rows else math.nan)
    if len(result.tasks) > 1 and math.isfinite(first) and run > 0:
        console.print(
            f"first rounds: every task's first round was done at {first:.0f} s of the run's {run:.0f} s "
            "(every task gets a round before any gets a second)"
            + ("; with a longer --deadline the tasks get more rounds" if first > FIRST_ROUNDS_SHARE * run else "")
        )
    busy = result.host_cpu_busy
    if math.isfinite(busy):
        console.print(
            f"host CPU: {100 * busy:.0f}% of the cores busy (this process and its build, walk and runner workers)"
        )
    builds = result.builds
    if math.isfinite(builds["busy"]):
        console.print(
            f"builds: workers busy {100 * builds['busy']:.0f}% of a batch's build time (median), "
            f"{builds['deferred']:.0f} picks left building for the next batch (--straggler-grace)"
        )
    if builds["refused"] > 0:
        console.print(
            f"builds: {builds['refused']:.0f} picks refused, their CUDA source over --max-source-kb "
            "(failed without compiling)"
        )
    for line in result.skipped_lines:
        console.print(f"skipped a corrupt database line: {line}", markup=False)


def _figure(ncols: int) -> tuple[Any, Any, Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, ncols, figsize=(5 * ncols, 3.8))
    return plt, fig, axes


def _save(plt: Any, fig: Any, path: str | os.PathLike) -> None:
    fig.tight_layout()
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=110)
    plt.close(fig)


def plot_curves(curves: Mapping[str, Sequence[dict]], path: str | os.PathLike, title: str | None = None) -> None:
    """PNG of the best estimated latency vs trials and vs search time (finite points only), one
    line per named curve (a legend when there are several)."""
    plt, fig, axes = _figure(2)
    for name, rows in curves.items():
        points = [
            (r["total_trials"], r["elapsed_s"], r["estimated_ms"]) for r in rows if math.isfinite(r["estimated_ms"])
        ]
        if points:
            trials, seconds, est = map(np.asarray, zip(*points))
            axes[0].step(trials, est, where="post", marker="o", markersize=5, label=name)
            axes[1].step(seconds, est, where="post", marker="o", markersize=5, label=name)
    axes[0].set_xlabel("trials")
    axes[1].set_xlabel("search time (s)")
    for ax in axes:
        ax.set_ylabel("estimated latency (ms)")
        ax.grid(alpha=0.3)
        if len(curves) > 1:
            ax.legend()
    if title:
        fig.suptitle(title, fontsize=10)
    _save(plt, fig, path)


def plot_tuning(rows: Sequence[dict], path: str | os.PathLike, title: str) -> None:
    """PNG of one run: estimated total vs trials (left), each task's best latency vs trials (right).

    A task's line starts at its first batch with a valid measurement; a task with one such batch is
    one marker. Tasks beyond 12 are left out of the legend (not of the plot).
    """
    plt, fig, (total, per_task) = _figure(2)
    points = [(r["total_trials"], r["estimated_ms"]) for r in rows if math.isfinite(r["estimated_ms"])]
    if points:
        trials, est = map(np.asarray, zip(*points))
        total.step(trials, est, where="post", marker="o", markersize=5)
    else:
        total.text(0.5, 0.5, "no valid estimate yet\n(a task has no valid run)", ha="center", transform=total.transAxes)
    tasks: dict[str, list[tuple[float, float]]] = {}
    for r in rows:
        if math.isfinite(r["best_us"]):
            tasks.setdefault(r["task"], []).append((r["total_trials"], r["best_us"]))
    for i, (task, pts) in enumerate(tasks.items()):
        x, y = map(np.asarray, zip(*pts))
        per_task.step(x, y, where="post", marker="o", markersize=5, label=task if i < 12 else None)
    if tasks:
        per_task.legend(fontsize=6, loc="upper right")
        per_task.set_yscale("log")
    total.set(xlabel="trials", ylabel="estimated total latency (ms)", title="whole workload")
    per_task.set(xlabel="trials (all tasks)", ylabel="best latency (us)", title="per task")
    for ax in (total, per_task):
        ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=10)
    _save(plt, fig, path)
