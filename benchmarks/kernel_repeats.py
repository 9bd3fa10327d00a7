"""How many of a tuning run's trials measured a kernel it had measured before.

MetaSchedule never measures a schedule twice: it keys schedules by the structural hash of the
scheduled module. Two schedules that differ only where the generated code does not (for example the
split of a loop that is unrolled either way) still compile to the same kernel, and both are built
and measured. This replays each measured record of a tuning database (a suite arm's, plain or xz)
in the order it was committed, generates its code as a build does (`tvm.tirx.build`: the device
source and the host code; on a host without CUDA the build stops at the source, so no NVRTC), and
counts the trials whose device source and host code are the same as an earlier trial's. The
latencies measured for one kernel show how far one measurement can be from another of the same
code (their spread is the measurement noise, and whatever else slowed a measurement down).

    python benchmarks/kernel_repeats.py --databases "[benchmarks/results/suite_databases/ablations/suite_local/dense_128x3072x768/pruner-s1]" --records 300
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.cli import doc_parser

SLOW = 1.1
"""A measurement more than this times its kernel's fastest is counted as slow (`slow_share`)."""


def repeats(database: str, target, limit: int, fastest: int = 0) -> dict:
    """The first `limit` valid records of `database` (task by task, each in commit order; a trace
    stored twice counts once, as `data.records.read_records` reads it): how many repeat a kernel, the
    spread (max / min) of the latencies measured for each kernel measured more than once, the share
    of those kernels' measurements more than `SLOW` times the kernel's fastest, and `first_best`: each
    task's best latency had every kernel counted only its first measurement (as a run with
    `--reuse-kernels` counts it), over its best of all measurements (a geometric mean over the tasks;
    1.0 for a run that reused every repeated kernel's measurement); a task is a workload (a network's
    arm holds its tasks in one folder). `fastest`: also the `fastest` kernels of least latency, each
    as its measurements, [record's place among the valid records in commit order, from 0; latency in
    us] (printed as "us (#place)")."""
    from benchmarks.build_profile import replay
    from data.records import read_records
    from tvm_env import kernel_key, tvm

    tasks = read_records([database]).tasks.values()  # a suite arm's network: its tasks in one folder
    records = [(r.workload.shash, r) for task in tasks for r in task.records if r.valid][:limit]
    kernels: dict[str, list[float]] = {}
    firsts: dict[str, dict[str, float]] = {}  # workload -> kernel -> its first measurement
    unbuilt = 0
    places: dict[str, list[list[float]]] = {}
    for place, (workload, record) in enumerate(records):
        try:
            key = kernel_key(tvm.tirx.build(replay(record).mod, target))
        except Exception:  # a record whose trace no longer builds here: not counted
            unbuilt += 1
            continue
        kernels.setdefault(key, []).append(record.latency)
        places.setdefault(key, []).append([place, round(record.latency * 1e6, 4)])
        firsts.setdefault(workload, {}).setdefault(key, record.latency)
    spreads = sorted(max(v) / min(v) for v in kernels.values() if len(v) > 1)
    again = [t / min(v) for v in kernels.values() if len(v) > 1 for t in v]  # measurements of repeated kernels
    built = sum(len(v) for v in kernels.values())
    gains = [min(first.values()) / min(min(kernels[k]) for k in first) for first in firsts.values()]
    return {
        "records": built,
        "unbuilt": unbuilt,
        "kernels": len(kernels),
        "repeats": built - len(kernels),
        "repeat_share": (built - len(kernels)) / built if built else float("nan"),
        "spread_median": statistics.median(spreads) if spreads else float("nan"),
        "spread_max": spreads[-1] if spreads else float("nan"),
        "slow_share": sum(r > SLOW for r in again) / len(again) if again else float("nan"),
        "first_best": math.exp(statistics.fmean(math.log(g) for g in gains)) if gains else float("nan"),
        "fastest": sorted(places.values(), key=lambda m: min(us for _, us in m))[:fastest],
    }


def main(argv: list[str] | None = None) -> dict[str, dict]:
    parser = doc_parser(__doc__)
    parser.add_argument("--databases", type=list[str], required=True, help="tuning databases (folders)")
    parser.add_argument("--target", default="nvidia/nvidia-h100", help="the target the records were built for")
    parser.add_argument("--records", type=int, default=300, help="the first N valid records of each")
    parser.add_argument("--json", default=None, help="write the figures here too")
    parser.add_argument(
        "--fastest", type=int, default=0, help="also print each database's N fastest kernels, every measurement of each"
    )
    args = parser.parse_args(argv)
    if args.fastest < 0:
        parser.error(f"--fastest {args.fastest}: a count of kernels, >= 0")

    import tvm_env

    target = tvm_env.parse_target(args.target)
    tvm_env.setup(target)
    out = {db: repeats(db, target, args.records, args.fastest) for db in args.databases}
    print(
        "| database | trials | kernels | repeats | latency spread in a kernel: median / max "
        f"| a repeated kernel's measurements over {SLOW}x its fastest | best, first measurements only |"
        "\n|---|---|---|---|---|---|---|"
    )
    for db, r in out.items():
        print(
            f"| {db} | {r['records']} | {r['kernels']} | {r['repeats']} ({100 * r['repeat_share']:.0f}%) "
            f"| {r['spread_median']:.4f} / {r['spread_max']:.4f} | {100 * r['slow_share']:.0f}% "
            f"| {r['first_best']:.4f}x |"
        )
    for db, r in out.items():
        for i, measured in enumerate(r["fastest"]):
            readings = ", ".join(f"{us:.3f} (#{place})" for place, us in measured)
            print(f"{db} kernel {i}: {readings}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    main()
