"""How much CUDA source do the schedules a tuning run measured make, and the best of them?

NVRTC's compile time follows the size of the generated source (explicit unrolling can make it
megabytes), and a batch of builds waits for its slowest, so a size limit for the builder
(`--max-source-kb`, `tvm_env.nvrtc.set_max_source_kb`) must sit above what the best schedules
need. Generating the source needs no GPU and no NVRTC: for each tuning database (a work dir of
`benchmarks/tuning.py`, plain or xz) this replays `--sample` random measured schedules and reports
their source sizes; the databases of one workload (same parent folder, e.g.
`benchmarks/results/suite_databases/<workload>/<arm>`) are pooled for the sizes of its `--best`
fastest schedules. Each database's sample is also split by the schedule's unroll step (the largest
`pragma_auto_unroll_max_step` on its loops, which MetaSchedule samples per block; 0 when none): how
often a run picked each step, and how large each step's kernels were. Explicit unrolling is what
makes kernels big, so this shows whether a cost model favours the steps that build slowly, and
(from each step's measured latencies, and the step of each fastest schedule) whether those steps
are where the fast schedules are. With
`--estimate`, each sampled schedule is also sized before it builds (`bridge.build_size`): how well
the estimate follows the real size (correlation of the logs, median ratio) and what it cost.

    python benchmarks/source_size.py --databases "[benchmarks/results/suite_databases/dense_128x3072x768/xgb-s0, ...]" \
        --sample 240 --best 10 --json_out benchmarks/results/source_size_suite.json
"""

from __future__ import annotations

import json
import math
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
from jsonargparse import CLI

from benchmarks.build_profile import replay
from bridge.build_size import estimated_source_kb
from data.atomic import atomic_write_text
from data.records import read_records
from tvm_env import parse_target, setup, tvm

LIMITS_KB = (256, 512)


def unroll_step(sch: tvm.s_tir.Schedule) -> int:
    """The largest `pragma_auto_unroll_max_step` on any loop of the schedule's functions (0: none)."""
    step = 0
    for gv in sch.mod.get_global_vars():
        sch.work_on(gv.name_hint)
        blocks = [sch.get_sblock("root")]
        while blocks:
            block = blocks.pop()
            for loop in sch.get_loops(block):
                annotations = sch.get(loop).annotations
                if "pragma_auto_unroll_max_step" in annotations:
                    step = max(step, int(annotations["pragma_auto_unroll_max_step"]))
            blocks.extend(sch.get_child_blocks(block))
    return step


def source_kb(record, target, sch: tvm.s_tir.Schedule | None = None) -> float | None:
    """KB of the CUDA source of a measured record's schedule (its trace replayed on its workload,
    unless `sch` is that replay already); None when it does not build (a record of a failed build)."""
    sch = replay(record) if sch is None else sch
    try:
        (device,) = tvm.tirx.build(sch.mod, target).imports
    except (RuntimeError, ValueError):  # TVM's errors (InternalError, ...) derive from these
        return None
    return len(device.inspect_source()) / 1024


def source_size(
    databases: tuple[str, ...],
    target: str = "nvidia/nvidia-h100",
    sample: int = 240,
    best: int = 10,
    seed: int = 0,
    estimate: bool = False,
    json_out: Path | None = None,
) -> dict:
    """Source sizes per database and of each workload's best schedules; print them; write `json_out`.

    Args:
        databases: tuning databases (work dirs), grouped into workloads by their parent folder.
        target: the CUDA target the schedules were tuned for.
        sample: measured schedules sized per database (random, `seed`; all when fewer).
        best: the fastest this-many of each workload's pooled records are sized too.
        estimate: also estimate each sampled schedule's size before it builds (`bridge.build_size`).
        json_out: where to write the sizes.
    """
    tgt = parse_target(target)
    setup(tgt)
    per_db, pooled = {}, {}
    for db in databases:
        records = [r for task in read_records([db]).tasks.values() for r in task.records]
        pooled.setdefault(str(Path(db).parent), []).extend(records)
        picked = random.Random(seed).sample(records, min(sample, len(records)))
        schedules = [replay(r) for r in picked]
        built, source_ms = [], []
        for r, sch in zip(picked, schedules):
            start = time.perf_counter()
            built.append(source_kb(r, tgt, sch))
            source_ms.append(1e3 * (time.perf_counter() - start))
        steps = [unroll_step(sch) for sch in schedules]
        sizes = sorted(s for s in built if s is not None)
        per_db[db] = {
            "sized": len(sizes),
            "no_build": len(built) - len(sizes),
            "median_kb": statistics.median(sizes),
            "p90_kb": sizes[int(0.9 * (len(sizes) - 1))],
            "max_kb": sizes[-1],
            **over_limits(sizes),
            "by_unroll": by_unroll(steps, built, [r.latency * 1e6 for r in picked]),
        }
        if estimate:
            per_db[db]["estimate"] = {
                **estimate_quality(schedules, built, tgt),
                "source_ms_median": statistics.median(source_ms),  # lowering + generating the source, no NVRTC
            }
        row = per_db[db]
        print(
            f"{db}: {row['sized']} sized ({row['no_build']} do not build), median {row['median_kb']:.0f} KB, p90 {row['p90_kb']:.0f}, "
            f"max {row['max_kb']:.0f}; " + ", ".join(f"over {k} KB {row[f'over_{k}_kb']:.0%}" for k in LIMITS_KB),
            flush=True,
        )
        print(
            "  by unroll step: "
            + "; ".join(
                f"{step} {u['share']:.0%} (median {u['median_kb']:.0f} KB, over 256 KB {u['over_256_kb']:.0%}, "
                + ("none ran)" if u["best_us"] is None else f"fastest {u['best_us']:.2f} us)")
                for step, u in row["by_unroll"].items()
            ),
            flush=True,
        )
        if estimate:
            e = row["estimate"]
            print(
                f"  estimated before the build: r(log) {e['r_log']:.3f}, estimate / size median {e['ratio_median']:.2f} "
                f"(p10 {e['ratio_p10']:.2f}, p90 {e['ratio_p90']:.2f}), {e['ms_median']:.1f} ms a schedule against "
                f"{e['source_ms_median']:.0f} ms to generate the source (medians); over 256 KB: "
                f"{e['over_256_kb']['real']} real, {e['over_256_kb']['estimated']} estimated, {e['over_256_kb']['both']} both",
                flush=True,
            )
    fastest = {}
    for workload, records in pooled.items():
        top = sorted((r for r in records if r.latency < float("inf")), key=lambda r: r.latency)[:best]
        fastest[workload] = []
        for r in top:
            sch = replay(r)
            fastest[workload].append(
                {"latency_us": r.latency * 1e6, "source_kb": source_kb(r, tgt, sch), "unroll_step": unroll_step(sch)}
            )
        shown = ", ".join(
            ("-" if f["source_kb"] is None else f"{f['source_kb']:.0f}") + f" (step {f['unroll_step']})"
            for f in fastest[workload]
        )
        print(f"{workload}: its {len(top)} fastest schedules, KB: {shown}")
    out = {"target": target, "databases": per_db, "fastest": fastest}
    if json_out:
        atomic_write_text(json_out, json.dumps(out, indent=1))
    return out


def over_limits(sizes: list[float]) -> dict[str, float]:
    """The share of `sizes` (KB) over each of `LIMITS_KB`, keyed `over_<limit>_kb`."""
    return {f"over_{k}_kb": sum(kb > k for kb in sizes) / len(sizes) for k in LIMITS_KB}


def by_unroll(steps: list[int], built: list[float | None], latencies_us: list[float]) -> dict[str, dict]:
    """Per unroll step (ascending; JSON keys are strings): the share of the sized schedules that have
    it, their median size and share over each of `LIMITS_KB`, and their fastest and median measured
    latency (us; None where none ran)."""
    out = {}
    n = sum(kb is not None for kb in built)
    for step in sorted(set(steps)):
        rows = [(kb, us) for s, kb, us in zip(steps, built, latencies_us) if s == step and kb is not None]
        if rows:
            sizes = sorted(kb for kb, _ in rows)
            out[str(step)] = {
                "sized": len(sizes),
                "share": len(sizes) / n,
                "median_kb": statistics.median(sizes),
                **over_limits(sizes),
                "best_us": min(ran) if (ran := [us for _, us in rows if math.isfinite(us)]) else None,
                "median_us": statistics.median(ran) if ran else None,
            }
    return out


def log_r(a: list[float], b: list[float]) -> float:
    """Pearson r of the logs of two positive series."""
    return float(np.corrcoef(np.log(a), np.log(b))[0, 1])


def estimate_quality(schedules: list, built: list[float | None], target) -> dict[str, float]:
    """How `bridge.build_size.estimated_source_kb` follows the real sizes `built` of `schedules` (those
    that build): Pearson r of the logs, the estimate / size ratio's median and 10th / 90th
    percentiles, the median milliseconds an estimate took, and at each of `LIMITS_KB` how many
    schedules were over it, estimated over it, and both."""
    pairs, millis = [], []
    for sch, kb in zip(schedules, built):
        if kb is None:
            continue
        start = time.perf_counter()
        pairs.append((estimated_source_kb(sch.mod, target), kb))
        millis.append(1e3 * (time.perf_counter() - start))
    ratios = sorted(est / kb for est, kb in pairs)
    return {
        "sized": len(pairs),
        "r_log": log_r([est for est, _ in pairs], [kb for _, kb in pairs]),
        "ratio_median": statistics.median(ratios),
        "ratio_p10": ratios[int(0.1 * (len(ratios) - 1))],
        "ratio_p90": ratios[int(0.9 * (len(ratios) - 1))],
        "ms_median": statistics.median(millis),
        # at each guard: schedules really over it, estimated over it, and both
        **{
            f"over_{k}_kb": {
                "real": sum(kb > k for _, kb in pairs),
                "estimated": sum(est > k for est, _ in pairs),
                "both": sum(est > k and kb > k for est, kb in pairs),
            }
            for k in LIMITS_KB
        },
    }


def main(argv: list[str] | None = None) -> dict:
    return CLI(source_size, args=argv, as_positional=False)


if __name__ == "__main__":
    main()
