"""Where a draft-then-verify round spends its time, without a GPU: draft a CUDA task's potential space.

Drafting needs no device: sampling the design space, MetaSchedule's evolution (mutators and
postprocessors, C++) and PSA's scoring (our lowering + the Python TIR walk) all run on the host.
The script runs `--rounds` rounds of `DraftVerifySearch`, each drafting (`redraft_every=1`; every
round after the first is a re-draft), on `--workload` (default: a conv2d of ResNet-50's first stage)
for an H100 target, the verifier being MetaSchedule's
RandomModel (scoring is free, so the verify share is the evolution's own cost), and splits each
round's wall time into MetaSchedule's sampling of fresh schedules (SampleInitPopulation, with
how many valid ones it returned of those asked for), PSA scoring (our lowering + walk), the
verifier's scoring and the rest (MetaSchedule's evolution: mutators and postprocessors; hashing).

    python benchmarks/draft_round.py --population 512 --potential 128
    python benchmarks/draft_round.py --population 1536 --potential 512 --walk-workers 16   # published sizes
    python benchmarks/draft_round.py --workload depthwise_conv2d:1,28,28,240,5,1,2 --rounds 3 --redraft-min-samples 8
    python benchmarks/draft_round.py --potential 256 --threads 16 --walk-workers 16 --profile   # where a draft waits

Each round's row also says how many cores were busy: this process's (the TuneContext threads'
sampling and evolution, the walk's JSON trip) and the walk workers'. `--profile` samples the
drafting thread's stack (`benchmarks.stack_sampler`) and prints, per line of our code it sat at,
the wall seconds and the cores busy meanwhile: a site at 1 core is serial on a 16-core machine.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console
from rich.table import Table

import tvm_env
from benchmarks.cli import doc_parser
from benchmarks.stack_sampler import StackSampler
from bridge.config import SearchConfig
from bridge.draft_verify import DraftVerifySearch
from bridge.host_cpu import children, cpu_seconds
from bridge.psa import PSACostModel
from bridge.search import CountingCostModel
from bridge.search_log import SearchLog
from data.zoo import operator_task
from tvm_env import ms


def main(argv: list[str] | None = None) -> list[dict]:
    parser = doc_parser(__doc__)
    parser.add_argument("--target", default="nvidia/nvidia-h100")
    parser.add_argument("--psa", default="h100", help="PSA device row")
    parser.add_argument("--population", type=int, default=512)
    parser.add_argument("--potential", type=int, default=128)
    parser.add_argument("--threads", type=int, default=None, help="TuneContext threads (default: all cores)")
    parser.add_argument("--walk-workers", type=int, default=None, help="PSA walk processes (default: bridge.psa's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=2, help="drafting rounds (every round drafts)")
    parser.add_argument(
        "--workload", default="conv2d:1,56,56,64,64,3,1,1", help="operator spec (data.zoo.operator_task)"
    )
    parser.add_argument(
        "--redraft-min-samples",
        type=int,
        default=SearchConfig.redraft_min_samples,
        help="valid fresh samples a re-draft samples for (the search's default; MetaSchedule's: 50)",
    )
    parser.add_argument("--generations", type=int, default=SearchConfig.draft_generations, help="draft generations")
    parser.add_argument(
        "--first-generations", type=int, default=None, help="the first draft's generations (default: --generations)"
    )
    parser.add_argument(
        "--first-population", type=int, default=None, help="the first draft's population (default: --population)"
    )
    parser.add_argument(
        "--first-min-samples",
        type=int,
        default=SearchConfig.first_draft_min_samples,
        help="valid fresh samples the first draft samples for (MetaSchedule's: 50)",
    )
    parser.add_argument(
        "--no-constrained-sampling",
        dest="constrained_sampling",
        action="store_false",
        help="the first draft samples with MetaSchedule's SampleInitPopulation (default: bridge.sampling's)",
    )
    parser.add_argument("--profile", action="store_true", help="sample the drafting thread's stack (where it waits)")
    args = parser.parse_args(argv)

    target = tvm_env.parse_target(args.target)
    tvm_env.setup(target)
    mod = operator_task(args.workload).mod
    draft = CountingCostModel(model=PSACostModel(device=args.psa, workers=args.walk_workers), cache=False)
    verify = CountingCostModel(model=ms.cost_model.RandomModel(seed=args.seed), cache=False)
    log = SearchLog()
    strategy = DraftVerifySearch(
        draft=draft,
        population_size=args.population,
        potential_size=args.potential,
        draft_generations=args.generations,
        first_draft_generations=args.first_generations,
        first_draft_population=args.first_population,
        first_draft_min_samples=args.first_min_samples,
        constrained_sampling=args.constrained_sampling,
        redraft_every=1,
        redraft_min_samples=args.redraft_min_samples,
        log=log,
    )
    context = tvm_env.task_context(mod, target, strategy, "conv2d", threads=args.threads or "physical", seed=args.seed)
    strategy.pre_tuning(16 * args.rounds, 16, context.generate_design_space(), ms.database.MemoryDatabase(), verify)
    print(
        f"{args.workload}, target {args.target}, population {args.population}, potential {args.potential}, "
        f"re-draft min samples {args.redraft_min_samples}, "
        f"first draft's sampler {'constrained' if args.constrained_sampling else 'MetaSchedule'}, "
        f"{int(context.num_threads)} threads, walk workers {draft.model.features.pool.workers}"
    )

    table = Table(title="drafting rounds (seconds)")
    for col in (
        "round",
        "whole",
        "sampling",
        "valid samples / asked",
        "PSA",
        "PSA scored",
        "ms each",
        "verifier",
        "evolution, hashing",
        "cores: here / walk workers",
    ):
        table.add_column(col, justify="right")
    sampler = StackSampler()
    rounds: list[dict] = []
    for r in range(args.rounds):
        before = (draft.seconds, draft.scored, verify.seconds)
        kids = {k: cpu_seconds(k) for k in children()}
        cpu = cpu_seconds()
        start = time.perf_counter()
        if args.profile:
            with sampler:
                strategy.generate_measure_candidates()
        else:
            strategy.generate_measure_candidates()
        total = time.perf_counter() - start
        cores = (cpu_seconds() - cpu) / total
        kid_cores = sum(cpu_seconds(k) - kids.get(k, 0.0) for k in children()) / total
        psa_s, psa_n, verify_s = draft.seconds - before[0], draft.scored - before[1], verify.seconds - before[2]
        stats = log.searched("conv2d")
        sample_s = stats.get("sample_s", 0.0)
        rest = total - sample_s - psa_s - verify_s
        rounds.append(
            {
                "whole_s": total,
                "sample_s": sample_s,
                "samples": stats.get("samples", 0),
                "samples_asked": stats.get("samples_asked", 0),
                "psa_scored": psa_n,
            }
        )
        table.add_row(
            str(r),
            f"{total:.1f}",
            f"{sample_s:.1f} ({sample_s / total:.0%})",
            f"{stats.get('samples', 0)} / {stats.get('samples_asked', 0)}",
            f"{psa_s:.1f}",
            str(psa_n),
            f"{1e3 * psa_s / max(psa_n, 1):.1f}",
            f"{verify_s:.1f}",
            f"{rest:.1f} ({rest / total:.0%})",
            f"{cores:.1f} / {kid_cores:.1f}",
        )
    strategy.post_tuning()
    Console().print(table)
    if args.profile:
        sites = Table(title="where the drafting thread was (all rounds; sampled every 20 ms)")
        for col in ("site", "wall s", "share", "cores here", "cores in walk workers"):
            sites.add_column(col, justify="left" if col == "site" else "right")
        for site, wall, share, here, kids_busy in sampler.rows():
            sites.add_row(site, f"{wall:.1f}", f"{share:.0%}", f"{here:.1f}", f"{kids_busy:.1f}")
        Console().print(sites)
    return rounds


if __name__ == "__main__":
    main()
