"""How many valid schedules a pass of MetaSchedule's sampling yields, task by task: what a first draft's
sampling costs.

A first draft asks MetaSchedule's `SampleInitPopulation` for a population's worth of random schedules
(512) in a pass, keeps those its postprocessors pass (`VerifyGPUCode` among them), and repeats passes
until it has `--first-draft-min-samples` valid ones (MetaSchedule's `init_min_unmeasured`, 50). For
each task of a zoo network (or each `--workload`) on a CUDA target (no GPU needed), the script runs
`--passes` single passes on the task's first-draft sampler and prints each pass's valid schedules and
seconds, the distinct ones over all passes (marked enumerated when the first pass alone drew the whole
space, as a first draft judges it: `bridge.drafting.enumerated`), and the passes that 50 and 16 valid
schedules take at the mean yield. A pass that yields none is sampled again by MetaSchedule (up to
five times) and counts here as one, with its seconds: on a task of 3-4 valid schedules in 512,
about one pass in thirty.

Beside it, on a GPU target, the same passes of `bridge.sampling.ConstrainedSampler` (what a first
draft samples with by default: draws whose threads or shared memory `VerifyGPUCode` would reject are
turned away before they are replayed; a pass is as many replays): its valid schedules and seconds a
pass, and the milliseconds a valid schedule costs under each.

    python benchmarks/sample_yield.py --network vit_b16 --passes 2 --threads 2 --out benchmarks/results/sample_yield/vit_b16.json
    python benchmarks/sample_yield.py --workload conv2d:1,224,224,3,768,16,16,0 matmul:128,768,768 --passes 3
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.cli import doc_parser  # noqa: E402
from bridge import drafting  # noqa: E402
from bridge.draft_verify import FIRST_DRAFT_MIN_SAMPLES, DraftVerifySearch  # noqa: E402
from bridge.psa import PSACostModel  # noqa: E402
from bridge.sampling import ConstrainedSampler  # noqa: E402
from bridge.search import _pairs  # noqa: E402
from data.zoo import operator_task  # noqa: E402
from data.zoo.tasks import extract_network_tasks  # noqa: E402
from tvm_env import is_gpu, ms, parse_target, setup, task_context  # noqa: E402


def pre_tuned(strategy: DraftVerifySearch, mod, target, name: str, threads: int, seed: int) -> DraftVerifySearch:
    """`strategy` made ready to draft one task on `threads` (an in-memory database, a random verifier):
    its sampling and drafts need no GPU. End it with `_finish()`."""
    context = task_context(mod, target, strategy, name, threads=threads, seed=seed)
    strategy.pre_tuning(
        64, 16, context.generate_design_space(), ms.database.MemoryDatabase(), ms.cost_model.RandomModel()
    )
    return strategy


def task_yield(mod, target, name: str, passes: int, population: int, threads: int, seed: int) -> dict:
    """`passes` single sampling passes of `population` on one task: valid and seconds of each, and the
    distinct schedules over all of them."""
    strategy = DraftVerifySearch(
        draft=PSACostModel(device="h100"), population_size=population, potential_size=min(256, population)
    )
    pre_tuned(strategy, mod, target, name, threads, seed)
    try:
        sampler = strategy._evolutionary_search(population, 0, strategy.draft_model, min_samples=1)  # one pass a call
        valid, seconds, drawn = [], [], []
        for _ in range(passes):
            start = time.perf_counter()
            got = list(drafting._SAMPLE_INIT(sampler, population))
            seconds.append(time.perf_counter() - start)
            valid.append(len(got))
            drawn.append([k for k, _ in _pairs(got)])
        constrained = None
        if is_gpu(target):
            fitted = ConstrainedSampler(strategy.context, strategy.design_spaces, 1, threads, seed=seed)
            constrained = {"valid": [], "seconds": []}
            for _ in range(passes):
                start = time.perf_counter()
                constrained["valid"].append(len(fitted.sample(population)))
                constrained["seconds"].append(time.perf_counter() - start)
            constrained["stats"] = fitted.stats
    finally:
        strategy._finish()
    mean = sum(valid) / passes
    return {
        "task": name,
        "valid": valid,
        "seconds": seconds,
        "distinct": len({k for keys in drawn for k in keys}),
        # judged on one pass, a first draft's samples, as `Draft.run` judges them
        "enumerated": drafting.drew_whole_space(drawn[0]),
        "passes_for_50": math.ceil(FIRST_DRAFT_MIN_SAMPLES / mean) if mean else None,
        "passes_for_16": math.ceil(16 / mean) if mean else None,
        "ms_a_valid": _ms_a_valid(valid, seconds),
        "constrained": constrained,
        "constrained_ms_a_valid": _ms_a_valid(constrained["valid"], constrained["seconds"]) if constrained else None,
    }


def _ms_a_valid(valid: list[int], seconds: list[float]) -> float | None:
    return 1000 * sum(seconds) / sum(valid) if sum(valid) else None


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _cells(constrained: dict | None) -> str:
    if constrained is None:
        return "- | -"
    return f"{', '.join(map(str, constrained['valid']))} | {', '.join(f'{s:.2f}' for s in constrained['seconds'])}"


def main(argv: list[str] | None = None) -> list[dict]:
    parser = doc_parser(__doc__)
    parser.add_argument("--network", default=None, help="a zoo network (data.zoo); or --workload")
    parser.add_argument("--input-size", type=int, default=None, help="the network's input size (default: the zoo's)")
    parser.add_argument("--workload", nargs="+", default=[], help="operator specs (data.zoo.operator_task)")
    parser.add_argument("--tasks", type=int, default=None, help="the network's first this-many tasks only")
    parser.add_argument("--target", default="nvidia/nvidia-h100")
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--population", type=int, default=512, help="schedules a pass asks for")
    parser.add_argument("--threads", type=int, default=2, help="the TuneContext's threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="a JSON file for the rows")
    args = parser.parse_args(argv)
    if bool(args.network) == bool(args.workload):
        parser.error("give --network or --workload")
    if args.passes < 1:
        parser.error(f"--passes {args.passes} must be >= 1")
    target = parse_target(args.target)
    setup(target)
    if args.network:
        tasks = [(t.name, t.mod) for t in extract_network_tasks(args.network, target, args.input_size)][: args.tasks]
    else:
        tasks = [(spec, operator_task(spec).mod) for spec in args.workload]
    rows = []
    print(
        "| task | valid a pass | seconds a pass | distinct | passes for 50 | passes for 16 | ms a valid one "
        "| constrained: valid a pass | seconds a pass | ms a valid one |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, mod in tasks:
        row = task_yield(mod, target, name, args.passes, args.population, args.threads, args.seed)
        rows.append(row)
        print(
            f"| {name} | {', '.join(map(str, row['valid']))} | {', '.join(f'{s:.2f}' for s in row['seconds'])} "
            f"| {row['distinct']}{' (enumerated)' if row['enumerated'] else ''} | {row['passes_for_50']} "
            f"| {row['passes_for_16']} | {_ms(row['ms_a_valid'])} | {_cells(row['constrained'])} "
            f"| {_ms(row['constrained_ms_a_valid'])} |",
            flush=True,
        )
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"argv": vars(args), "rows": rows}, indent=1) + "\n")
    return rows


if __name__ == "__main__":
    main()
