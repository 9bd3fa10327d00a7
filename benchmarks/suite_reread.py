"""The tuning suite's arms on one scale: each curve rescaled by its best kernel's re-read.

A run's best latency is the least of its readings, and the readings of one kernel can spread (with
`--timer graph` they fell in two groups 0.17-0.20 us a launch apart, 5-10% of a 2-4 us kernel,
docs/benchmarks.md), so an arm
that measured 2,000 trials reports a best further below its kernel's time than one that measured
100. `benchmarks/launch_floor.py --json` reads each arm's best kernels again, all on one machine, in
rounds. `tuning.py --report --reread FILE...` multiplies every arm's curve by its best kernel's
re-read over its reported latency, so that the arms are compared on the re-read's scale. That assumes
a run's whole curve is off by as much as its best, which is conservative for the arm with the most
trials.

A re-read is the median of a kernel's `--timer graph` readings (`graph_timer_us`: the timer a run's
runner uses with `--timer graph`), idle and loaded, or idle only in a file whose loaded state trained
a network on the GPU (`--gpu-burn`). A kernel read in several files pools its readings. A kernel
without such readings (its graph failed, or the file is from a host without a GPU) is refused, as is
an arm whose database holds several workloads (a network's: its kernels are of different tasks, and
its curve is their sum) and a re-read whose reported latency is not the curve's best (another run's
database of the same name). Arms are matched by their database folder's name, `<method>-s<seed>`: an
arm that `--take FOLDER:LABEL=METHOD` renamed is looked for under METHOD, and so is not found.
The plot (`--plot`) draws the rescaled curves.

An arm's own re-read (`<method>-s<seed>.reread.json` beside its CSV: a run re-reads its best records
once its search has stopped, `bridge.reread`, by default on a GPU) counts instead: its factor is the
least median re-read of the arm's best records over its best reading, read with the arm's own timer,
so it corrects the run's conditions without changing the timer's scale. When the best record itself
did not rebuild, the factor is another kernel's re-read (the one the arm's compile takes) over the
best reading, and the check that the re-read is of the curve's best cannot tell. One report takes either the
arms' own re-reads or launch_floor.py files, not both (their scales differ when the arms were timed
by the evaluator).
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

__all__ = ["reread_factors", "rescale"]

TIMER = "graph_timer_us"
"""The readings a re-read is the median of."""


def _arm(path: Path, name: str) -> tuple[tuple[str, str, int], str]:
    """((workload slug, method, seed), the record's workload) of a kernel named "DB WORKLOAD #i", DB
    ending in `<workload slug>/<method>-s<seed>`."""
    database, workload, *_ = name.split(" ") + ["", ""]
    folder = Path(database)
    method, sep, seed = folder.name.rpartition("-s")
    if not sep or not seed.isdigit() or not workload:
        raise ValueError(f"{path}: kernel {name!r} does not name a database <workload>/<method>-s<seed> and a workload")
    return (folder.parent.name, method, int(seed)), workload


def reread_factors(*paths: Path) -> dict[tuple[str, str, int], tuple[float, float]]:
    """(workload slug, method, seed) -> (the reported latency of that arm's best kernel in us, its
    re-read over that), from `benchmarks/launch_floor.py --json` files (the module's docstring says
    which readings count, and what is refused)."""
    readings: dict[tuple[str, str, int], dict[float, list[float]]] = {}
    workloads: dict[tuple[str, str, int], set[str]] = {}
    own: dict[tuple[str, str, int], tuple[float, float]] = {}  # from the arms' own re-reads
    for path in map(Path, paths):
        body = json.loads(Path(path).read_text())
        if isinstance(body, dict) and isinstance(body.get("reread"), dict):
            key, entry = _own_reread(path, body["reread"])
            if key in own:
                raise ValueError(f"--reread: {key[1]} seed {key[2]} of {key[0]} has two own re-reads; give one")
            own[key] = (entry["reported_us"], entry["reread_us"] / entry["reported_us"])
            continue
        kernels = body.get("kernels") if isinstance(body, dict) else None
        if not isinstance(kernels, dict):
            raise ValueError(f"{path}: not a launch_floor.py JSON (no 'kernels' object) nor an arm's re-read")
        states = ("idle",) if body.get("gpu_burn") else ("idle", "loaded")
        for name, entry in kernels.items():
            if entry.get("reported_us") is None:
                continue  # the floor kernel
            key, workload = _arm(path, name)
            read = [x for state in states for x in entry.get(state, {}).get(TIMER, [])]
            if not read:
                raise ValueError(f"{path}: kernel {name!r} has no {TIMER} readings (its graph failed, or no GPU)")
            workloads.setdefault(key, set()).add(workload)
            readings.setdefault(key, {}).setdefault(float(entry["reported_us"]), []).extend(read)
    out = {}
    for key, by_reported in readings.items():
        if len(workloads[key]) > 1:
            raise ValueError(
                f"--reread: {key[1]} seed {key[2]} of {key[0]} holds kernels of {len(workloads[key])} workloads "
                "(a network's arm): its curve is their sum, which one kernel's re-read does not rescale"
            )
        reported = min(by_reported)
        out[key] = (reported, statistics.median(by_reported[reported]) / reported)
    if out and own:  # an arm's own re-read is on its own timer's scale, a launch_floor.py file's on the graph's
        raise ValueError(
            "--reread: give the arms' own re-reads (<method>-s<seed>.reread.json) or launch_floor.py files, not "
            "both: an arm's own is read with its run's timer, a launch_floor.py re-read as a CUDA graph"
        )
    return out or own


def _own_reread(path: Path, tasks: dict) -> tuple[tuple[str, str, int], dict]:
    """(workload slug, method, seed) and the one task's entry of an arm's own re-read,
    `<workload slug>/<method>-s<seed>.reread.json` (`benchmarks/tuning.py`)."""
    method, sep, seed = path.name.removesuffix(".reread.json").rpartition("-s")
    if not path.name.endswith(".reread.json") or not sep or not seed.isdigit():
        raise ValueError(f"{path}: an arm's re-read is named <method>-s<seed>.reread.json")
    if len(tasks) != 1:
        raise ValueError(
            f"--reread: {path} holds {len(tasks)} tasks (a network's arm): its curve is their sum, which one "
            "kernel's re-read does not rescale"
        )
    (entry,) = tasks.values()
    return (path.parent.name, method, int(seed)), entry


def rescale(data: dict, factors: dict[tuple[str, str, int], tuple[float, float]], baseline: str) -> list[str]:
    """Multiply the curve of every arm of `data` (workload -> method -> seed -> rows) on a workload
    with a `baseline` arm (the ones the report shows) by its factor; the report's lines that say so.

    Raises:
        ValueError: an arm without a re-read, or whose re-read kernel's reported latency is not the
            curve's best (the re-read is of another run).
    """
    lines = [
        f"- every curve (and the plot's) rescaled by its best kernel's re-read ({TIMER} medians of launch_floor.py "
        "files, or the arms' own re-reads) over its reported latency:"
    ]
    for workload, methods in sorted(data.items()):
        if baseline not in methods:
            continue
        for method, runs in sorted(methods.items()):
            for seed, rows in sorted(runs.items()):
                if (workload, method, seed) not in factors:
                    raise ValueError(f"--reread: no re-read of {method} seed {seed} of {workload}'s best kernel")
                reported, factor = factors[workload, method, seed]
                best = min(r["estimated_ms"] for r in rows) * 1e3
                if not math.isclose(best, reported, rel_tol=1e-6):
                    raise ValueError(
                        f"--reread: {method} seed {seed} of {workload}: the re-read kernel was reported at "
                        f"{reported:.4f} us, the curve's best is {best:.4f} us (a re-read of another run, or the "
                        "best kernel was not re-read: it did not build there)"
                    )
                runs[seed] = [{**r, "estimated_ms": r["estimated_ms"] * factor} for r in rows]
                lines.append(f"  {workload} {method} s{seed}: x{factor:.3f}")
    return lines
