"""Which schedules does a draft keep? The first draft's potential space under each PSA formula.

Runs the first drafting round of `DraftVerifySearch` (MetaSchedule's sampling and evolution, PSA
scoring; no GPU needed) on a matmul-like workload for a CUDA target, once per PSA formula and
seed, and counts the potential space's schedules by the number of stages their reduction is split
into: the product of the outer factors of the reduction loops' tiles (the three-level
`SamplePerfectTile` decisions of MetaSchedule's multi-level tiling; the spatial loops' have five). On the H100, the fastest batch_matmul
schedules that MetaSchedule's default found keep the reduction unsplit (1 stage), and the published
PSA formula, which counts one stage's DRAM traffic, drafted few of them (docs/benchmarks.md, "PSA's
DRAM traffic over every trip").

    python benchmarks/draft_space.py --workload batch_matmul:12,128,128,64 --formulas published traffic-occupancy --seeds 0 1
    python benchmarks/draft_space.py --workload conv2d:1,35,35,64,96,3,1,1 --formulas traffic-occupancy traffic-stages --seeds 0 1 2

`--best-of DB...` instead counts tuning databases' best schedules by their stages (no draft): which
stages the runs ended on, and at what latency.

    python benchmarks/draft_space.py --best-of $(find benchmarks/results/suite_databases -type d -path '*/conv2d_1x35x35x64x96x3x1x1/*')
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.cli import doc_parser


def stages_of(tiles: list[list[int]]) -> int | None:
    """Product of the outer factors of the three-level tiles among `tiles` (the decisions of a
    trace's `SamplePerfectTile`s, in order): the reduction loops' (None without one)."""
    reduction = [tile for tile in tiles if len(tile) == 3]
    return int(np.prod([int(tile[0]) for tile in reduction])) if reduction else None


def reduction_stages(sch) -> int | None:
    """`stages_of` a schedule's sampled tiles."""
    trace = sch.trace
    return stages_of([list(trace.decisions[i]) for i in trace.insts if i.kind.name == "SamplePerfectTile"])


def best_stages(folder: str) -> tuple[float, int | None] | None:
    """(latency in us, stages) of the fastest valid schedule of a tuning database folder (plain or
    `.xz` files; no TVM), None when none is valid."""
    from data.records import read_records

    tasks = read_records([folder]).tasks.values()
    records = [r for task in tasks for r in task.records if r.valid]
    if not records:
        return None
    best = min(records, key=lambda r: r.latency)
    insts, decisions = best.trace
    tiles = [value for index, value in decisions if insts[index][0] == "SamplePerfectTile"]
    return best.latency * 1e6, stages_of(tiles)


def first_draft(workload: str, target, formula: str, seed: int, population: int, potential: int) -> Counter:
    """Reduction stages -> schedules of the first draft's potential space."""
    from bridge.draft_verify import DraftVerifySearch
    from bridge.psa import PSACostModel
    from data.zoo import operator_task
    from tvm_env import ms

    task = operator_task(workload)
    strategy = DraftVerifySearch(
        draft=PSACostModel(device="h100", formula=formula, workers=0),
        population_size=population,
        potential_size=potential,
    )
    context = ms.TuneContext(
        mod=task.mod,
        target=target,
        space_generator="post-order-apply",
        search_strategy=strategy,
        task_name=workload,
        num_threads="physical",
        rand_state=seed,
    )
    design_spaces = context.generate_design_space()
    strategy.pre_tuning(64, 16, design_spaces, ms.database.MemoryDatabase(), ms.cost_model.RandomModel(seed=seed))
    strategy.generate_measure_candidates()
    counts = Counter(reduction_stages(sch) for _, sch in strategy._potential)
    strategy.post_tuning()
    return counts


def main(argv: list[str] | None = None) -> None:
    parser = doc_parser(__doc__)
    parser.add_argument("--workload", default="batch_matmul:12,128,128,64", help="a data.zoo operator spec")
    parser.add_argument("--target", default="nvidia/nvidia-h100")
    parser.add_argument("--formulas", nargs="+", default=["published", "traffic-occupancy"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--population", type=int, default=512)
    parser.add_argument("--potential", type=int, default=256)
    parser.add_argument("--best-of", nargs="*", default=[], help="tuning database folders: their bests' stages")
    args = parser.parse_args(argv)
    if args.best_of:
        found = [b for b in map(best_stages, args.best_of) if b is not None]
        by_stages: dict = {}
        for latency, stages in found:
            by_stages.setdefault(stages, []).append(latency)
        print(f"{len(found)} databases' best schedules by reduction stages")
        print("| stages | databases | best latency (us): min / median / max |")
        print("|---|---|---|")
        for stages, lat in sorted(by_stages.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)):
            print(f"| {stages} | {len(lat)} | {min(lat):.2f} / {float(np.median(lat)):.2f} / {max(lat):.2f} |")
        return

    import tvm_env

    target = tvm_env.parse_target(args.target)
    tvm_env.setup(target)
    print(
        f"{args.workload}, {args.target}: first draft's potential space by reduction stages (population {args.population})"
    )
    print("| formula | seed | schedules | unsplit (1 stage) | median stages | stages: schedules |")
    print("|---|---|---|---|---|---|")
    for formula in args.formulas:
        for seed in args.seeds:
            c = first_draft(args.workload, target, formula, seed, args.population, args.potential)
            stages = sorted(k for k in c.elements() if k is not None)
            median = stages[len(stages) // 2] if stages else "-"
            spread = " ".join(f"{k}:{n}" for k, n in sorted((k, n) for k, n in c.items() if k is not None))
            print(f"| {formula} | {seed} | {sum(c.values())} | {c[1]} | {median} | {spread} |", flush=True)


if __name__ == "__main__":
    main()
