"""Which schedules does a draft keep? The first draft's potential space under each PSA formula.

Runs the first drafting round of `DraftVerifySearch` (MetaSchedule's sampling and evolution, PSA
scoring; no GPU needed) on a matmul-like workload for a CUDA target, once per PSA formula and
seed, and counts the potential space's schedules by the number of stages their reduction loop is
split into (the outer factor of the last `SamplePerfectTile` decision, which is the reduction
loop's on MetaSchedule's matmul and batch_matmul tiling). On the H100, the fastest batch_matmul
schedules that MetaSchedule's default found keep the reduction unsplit (1 stage), and the published
PSA formula, which counts one stage's DRAM traffic, drafted few of them (docs/benchmarks.md, "PSA's
DRAM traffic over every trip").

    python benchmarks/draft_space.py --workload batch_matmul:12,128,128,64 --formulas published traffic-occupancy --seeds 0 1
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.cli import doc_parser


def reduction_stages(sch) -> int | None:
    """Outer factor of the schedule's last sampled tile (None without one)."""
    trace = sch.trace
    tiles = [inst for inst in trace.insts if inst.kind.name == "SamplePerfectTile"]
    return int(trace.decisions[tiles[-1]][0]) if tiles else None


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
    args = parser.parse_args(argv)

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
