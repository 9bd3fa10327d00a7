"""Where the time of tuning runs went, one line a curve: trials, final latency, the GPU's idle share
and where it fell, drafting, builds (`bridge.curve` on each `tuning_curve.csv` or suite arm CSV).

    python benchmarks/curve_stats.py benchmarks/results/ablations/ab9_fill64*/*/pruner-s0.csv
    python benchmarks/curve_stats.py runs/mm/tuning_curve.csv --workers 16 --json stats.json

Columns: trials; final (the best latency, us); idle (share of the run with no batch on the device)
and its parts (before the first batch / rounds that waited on a draft / the rest), and the idle share
that the builds alone impose after the first batch (`bridge.curve.build_bound_idle`: a batch cannot
run before it is built) and the idle share between batches, from the first batch's start on
(`bridge.curve.idle_between_batches`, issue 12's measure); drafting (share
of the run spent drafting, alongside or in turn; wall: the share during which a draft ran, drafts at
once counted once); build (median seconds a batch took to build);
busy (median share of the build workers' time a batch kept busy; needs --workers); deferred (picks
a batch left building for the next); refused (picks the builder's source guard refused,
`--max-source-kb`); redrafts (drafts after the first); draft waits (seconds rounds
waited for drafts started alongside); first batch (when the first batch was measured, and its round's
drafting and verifying seconds); update (seconds of the cost model's update callback, in the loop),
training (seconds our cost model trained, in the background by default) and what of it scoring or a
save waited for (`learn_s`, `learn_wait_s`; n/a in curves from before 2026-11-28, ninth session);
host CPU (the share of the host's cores the run and its workers kept busy, `bridge.curve.host_cpu_busy`;
n/a in curves from before 2026-11-30, fifth session); runner (the runner's milliseconds a trial, `run_s`:
with MetaSchedule's `.tar` artifact it includes the untar and link, about 25 ms on an H200 machine)
and build CPU (the build workers' core-seconds a trial, `build_cpu_s`); reused (the share of trials
that took an earlier measurement of the same kernel, `--reuse-kernels`) and compiles cached (the
share whose CUDA compile came from the build pool's folder, `tvm_env.compile_cache`), n/a in curves
from before 2026-11-30, seventh session. With several curves, a last
line gives the medians of the first batch's numbers over them.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

from jsonargparse import ArgumentParser

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bridge.curve import (  # noqa: E402 - after the path insert, as the other benchmarks
    build_bound_idle,
    build_busy,
    build_per_round,
    column_total,
    deferred_picks,
    device_idle_parts,
    device_idle_share,
    drafting_share,
    drafting_wall_share,
    host_cpu_busy,
    idle_between_batches,
    per_trial,
    refused_picks,
)
from bridge.search_log import read_rounds  # noqa: E402


def curve_stats(rows: list[dict], workers: int = 16) -> dict[str, float]:
    """The statistics of one run's curve rows (module docstring); NaN where a column is missing."""
    if not rows:
        raise ValueError("no curve rows")
    waits = [float(r.get("draft_wait_s", math.nan)) for r in rows]
    return {
        "trials": float(rows[-1]["total_trials"]),
        "final_us": min(float(r["best_us"]) for r in rows),
        "idle": device_idle_share(rows),
        **{f"idle_{k}": v for k, v in device_idle_parts(rows).items()},
        "idle_builds": build_bound_idle(rows),
        "idle_between": idle_between_batches(rows),
        "drafting": drafting_share(rows),
        "drafting_wall": drafting_wall_share(rows),
        "build_s": build_per_round(rows),
        "busy": build_busy(rows, workers),
        "deferred": float(deferred_picks(rows)),
        "refused": float(refused_picks(rows)),
        "redrafts": float(sum(1 for r in rows[1:] if float(r.get("drafted", 0) or 0) > 0)),
        "draft_wait_s": float(sum(w for w in waits if math.isfinite(w))),
        "update_s": column_total(rows, "update_s"),
        "learn_s": column_total(rows, "learn_s"),
        "learn_wait_s": column_total(rows, "learn_wait_s"),
        "host_cpu": host_cpu_busy(rows),
        "runner_ms": 1e3 * per_trial(rows, "run_s"),
        "build_cpu": per_trial(rows, "build_cpu_s"),
        "reused": per_trial(rows, "reused"),
        "cached": per_trial(rows, "compiles_cached"),
        "first_s": float(rows[0]["elapsed_s"]),
        "first_draft_s": float(rows[0].get("draft_s", math.nan)),
        "first_verify_s": float(rows[0].get("verify_s", math.nan)),
    }


FIRST = ("first_s", "first_draft_s", "first_verify_s")


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%" if math.isfinite(x) else "n/a"


def line(path: str, stats: dict[str, float]) -> str:
    return (
        f"{path}: {stats['trials']:,.0f} trials, final {stats['final_us']:.2f} us, idle {_pct(stats['idle'])} "
        f"({_pct(stats['idle_before_first'])} / {_pct(stats['idle_drafts'])} / {_pct(stats['idle_other'])}; "
        f"builds alone {_pct(stats['idle_builds'])}; between batches {_pct(stats['idle_between'])}), "
        f"drafting {_pct(stats['drafting'])} (wall {_pct(stats['drafting_wall'])}), build {stats['build_s']:.1f} s, busy {_pct(stats['busy'])}, "
        f"deferred {stats['deferred']:.0f}, refused {stats['refused']:.0f}, redrafts {stats['redrafts']:.0f}, draft waits {stats['draft_wait_s']:.1f} s, "
        f"update {stats['update_s']:.1f} s, training {stats['learn_s']:.1f} s (waited for {stats['learn_wait_s']:.1f} s), "
        f"host CPU {_pct(stats['host_cpu'])}, runner {stats['runner_ms']:.0f} ms a trial, "
        f"build CPU {stats['build_cpu']:.2f} core-s a trial, reused {_pct(stats['reused'])}, "
        f"compiles cached {_pct(stats['cached'])}, " + _first(*(stats[k] for k in FIRST))
    )


def _s(x: float) -> str:
    return f"{x:.1f} s" if math.isfinite(x) else "n/a"


def _first(at: float, draft: float, verify: float) -> str:
    return f"first batch at {_s(at)} (draft {_s(draft)}, verify {_s(verify)})"


def _median(values: list[float]) -> float:
    """The median of the finite values; NaN when none is (XGB's curves have no draft columns)."""
    finite = [v for v in values if math.isfinite(v)]
    return statistics.median(finite) if finite else math.nan


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    p = ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("curves", nargs="+", help="tuning_curve.csv files or suite arm CSVs")
    p.add_argument("--workers", type=int, default=16, help="build workers of the runs (for busy)")
    p.add_argument("--json", default=None, help="also write the statistics here")
    args = p.parse_args(argv)
    out = {}
    for path in args.curves:
        rows = read_rounds(path)
        if not rows:
            raise ValueError(f"{path}: no curve rows (missing or empty)")
        out[path] = curve_stats(rows, args.workers)
        print(line(path, out[path]))
    if len(out) > 1:
        medians = [_median([s[k] for s in out.values()]) for k in FIRST]
        print(f"median over {len(out)} curves: " + _first(*medians))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
