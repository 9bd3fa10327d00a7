"""The walk pool's chunking: PSA featurization of a draft's batch sizes, chunks of `chunk` against even ones.

A draft asks PSA for scores in calls of a few sizes: its fresh samples (50-80 on a CUDA conv), then
each generation's new schedules (300-500); `data.features.WalkPool` sends each call's modules to its
worker processes in chunks. With chunks of 16 alone, a call of 70 on 16 workers kept 5 busy. This
times `featurize_candidates(..., stmt=False)` (what PSA asks for) on the pool, per call size, with
every chunk of `WalkPool.chunk` modules ("fixed") and with `WalkPool.chunk_size`'s even split
("even"), interleaved, on one CUDA task's schedules sampled here (no GPU needed). With `--parts` it
first times each step of a module's featurization alone, in this process, per module (warmed up, the
best of two passes): serializing
the scheduled module (what the pool sends), loading it back (a worker's first step), our lowering
(`lowered_json`), serial and on two threads, and the Python walk of the lowered text.

    python benchmarks/walk_pool.py --workers 16 --sizes 70 150 330 512
    python benchmarks/walk_pool.py --workers 2 --sizes 70 150 300 --parts
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tvm_env
from benchmarks.cli import doc_parser
from data.features import WalkPool, featurize_candidates
from data.zoo import operator_task
from tvm_env import ms


def main() -> None:
    parser = doc_parser(__doc__)
    parser.add_argument("--target", default="nvidia/nvidia-h100")
    parser.add_argument(
        "--workload", default="conv2d:1,35,35,64,96,3,1,1", help="operator spec (data.zoo.operator_task)"
    )
    parser.add_argument("--workers", type=int, default=None, help="walk processes (default: one a core)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[70, 150, 330, 512], help="modules a call")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--json", default=None, help="write the timings here")
    parser.add_argument("--parts", action="store_true", help="first time each step of a featurization alone")
    args = parser.parse_args()

    target = tvm_env.parse_target(args.target)
    tvm_env.setup(target)
    workers = args.workers or tvm_env.usable_cores()
    population = max(args.sizes)
    search = ms.search_strategy.EvolutionarySearch(population_size=population)
    context = tvm_env.task_context(
        operator_task(args.workload).mod, target, search, "walk_pool", threads="physical", seed=0
    )
    start = time.perf_counter()
    search.pre_tuning(
        population,
        population,
        context.generate_design_space(),
        ms.database.MemoryDatabase(),
        ms.cost_model.RandomModel(seed=0),
    )
    candidates = list(search.generate_measure_candidates())
    sizes = sorted({min(n, len(candidates)) for n in args.sizes})
    print(
        f"{len(candidates)} schedules of {args.workload} in {time.perf_counter() - start:.1f} s; {workers} walk workers"
    )
    parts = _parts([c.sch.mod for c in candidates]) if args.parts else None
    pool = WalkPool(workers, min_batch=1)
    featurize_candidates(context, candidates[: 2 * workers], stmt=False, pool=pool)  # start the workers
    even = pool.chunk_size
    times: dict[str, list[float]] = {}
    for _ in range(args.reps):
        for n in sizes:
            for name, size in (("fixed", lambda batch: pool.chunk), ("even", even)):
                pool.chunk_size = size
                start = time.perf_counter()
                featurize_candidates(context, candidates[:n], stmt=False, pool=pool)
                times.setdefault(f"{n} {name}", []).append(round(time.perf_counter() - start, 3))
    pool.close()
    print("| modules a call | chunks of 16 (s) | even chunks (s) | ms a module, 16 / even |\n|---|---|---|---|")
    for n in sizes:
        fixed, split = min(times[f"{n} fixed"]), min(times[f"{n} even"])
        print(
            f"| {n} | {times[f'{n} fixed']} | {times[f'{n} even']} | {1000 * fixed / n:.2f} / {1000 * split / n:.2f} |"
        )
    if args.json:
        Path(args.json).write_text(
            json.dumps({"workers": workers, "workload": args.workload, "seconds": times, "parts_ms": parts}, indent=1)
        )


def _parts(mods: list, reps: int = 2) -> dict[str, float]:
    """Milliseconds a module of each step of the pool's featurization, in this process: each step first
    warmed up on a few modules, then the best of `reps` passes over all of them."""
    from concurrent.futures import ThreadPoolExecutor

    from data.features.walk import lowered_json, walk_lowered
    from tvm_env import tvm

    out: dict[str, float] = {}

    def timed(label: str, fn, items: list):
        fn(items[:8])  # warm-up
        best = float("inf")
        for _ in range(reps):
            start = time.perf_counter()
            result = fn(items)
            best = min(best, time.perf_counter() - start)
        out[label] = round(1000 * best / len(items), 2)
        print(f"| {label} | {out[label]:.2f} |")
        return result

    print("| step | ms a module |\n|---|---|")
    with ThreadPoolExecutor(2) as threads:
        texts = timed(
            "save_json of the scheduled module (the pool's send)", lambda ms_: [tvm.ir.save_json(m) for m in ms_], mods
        )
        timed("save_json on 2 threads", lambda ms_: list(threads.map(tvm.ir.save_json, ms_)), mods)
        timed("load_json of it (a worker's first step)", lambda ts: [tvm.ir.load_json(t) for t in ts], texts)
        lowered = timed("lowering (lowered_json)", lambda ms_: [lowered_json(m) for m in ms_], mods)
        timed("lowering on 2 threads", lambda ms_: list(threads.map(lowered_json, ms_)), mods)
    timed("the Python walk of the lowered text", lambda ts: [walk_lowered(t, True) for t in ts], lowered)
    return out


if __name__ == "__main__":
    main()
