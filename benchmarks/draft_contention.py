"""How first drafts share a host: K tasks' first drafts at once in one process, T threads each.

tune.py drafts up to `--first-drafts-ahead` (4) tasks' first potential spaces at once, each on a
thread of its own (`bridge.drafting.Draft`), with `--first-draft-threads` (unset: the host's cores
shared among them). Inside a ResNet-18 run on the 16-core GPU machine, two at once beside the builds, a
convolution's first draft took about 33 s, as long as one alone on the 2-core CPU machine. This
script drafts K copies of one CUDA task (different seeds) at once, as tune.py does, and prints the
wall time of each draft, of all K, how many cores the process kept busy (its walk pool's processes
not counted), the schedules each draft had PSA score and the distinct ones PSA walked (each
configuration has a cache of its own), so that thread counts and concurrency can be compared on one
host (drafting needs no GPU):

    python benchmarks/draft_contention.py --concurrent 1 2 --threads 16 8 4
    python benchmarks/draft_contention.py --workload conv2d:1,28,28,128,128,3,1,1 --concurrent 2 --threads 2
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console
from rich.table import Table

import tvm_env
from benchmarks.cli import doc_parser
from bridge.draft_verify import FIRST_DRAFT_MIN_SAMPLES, DraftVerifySearch
from bridge.host_cpu import cpu_seconds
from bridge.psa import PSACostModel
from bridge.search import CountingCostModel
from data.features import FeatureCache, WalkPool, default_walk_workers
from data.zoo import operator_task
from tvm_env import ms


def draft_at_once(
    mod,
    target,
    draft: PSACostModel,
    concurrent: int,
    threads: int | str,
    population: int,
    seed: int,
    min_samples: int = FIRST_DRAFT_MIN_SAMPLES,
) -> tuple[list, list, float, float]:
    """Seconds of each of `concurrent` first drafts by `draft` run at once (one thread each), the
    schedules each draft scored, the wall seconds of all of them and the cores this process kept busy
    meanwhile (the walk workers' not counted)."""
    strategies, counters = [], []
    for k in range(concurrent):
        counters.append(CountingCostModel(model=draft, cache=False))
        strategy = DraftVerifySearch(
            draft=counters[-1],
            population_size=population,
            potential_size=population // 2,
            first_draft_min_samples=min_samples,
        )
        context = tvm_env.task_context(mod, target, strategy, f"task{k}", threads=threads, seed=seed + k)
        strategy.pre_tuning(
            16, 16, context.generate_design_space(), ms.database.MemoryDatabase(), ms.cost_model.RandomModel(seed=seed)
        )
        strategies.append(strategy)
    seconds = [0.0] * concurrent

    def run(k: int) -> None:
        start = time.perf_counter()
        strategies[k].generate_measure_candidates()
        seconds[k] = time.perf_counter() - start

    workers = [threading.Thread(target=run, args=(k,)) for k in range(concurrent)]
    cpu, start = cpu_seconds(), time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    wall = time.perf_counter() - start
    cores = (cpu_seconds() - cpu) / wall
    for strategy in strategies:
        strategy.post_tuning()
    return seconds, [c.scored for c in counters], wall, cores


def main(argv: list[str] | None = None) -> list[dict]:
    parser = doc_parser(__doc__)
    parser.add_argument("--target", default="nvidia/nvidia-h100")
    parser.add_argument("--workload", default="conv2d:1,56,56,64,64,3,1,1", help="operator spec (data.zoo)")
    parser.add_argument("--population", type=int, default=512)
    parser.add_argument("--concurrent", type=int, nargs="+", default=[1, 2], help="drafts at once (K)")
    parser.add_argument(
        "--threads", type=int, nargs="+", default=[0], help="threads a draft (T; 0: the physical cores)"
    )
    parser.add_argument("--walk-workers", type=int, default=None, help="PSA walk processes (default: bridge.psa's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--first-min-samples",
        type=int,
        default=FIRST_DRAFT_MIN_SAMPLES,
        help="valid fresh samples a first draft samples for (MetaSchedule's 50)",
    )
    args = parser.parse_args(argv)

    target = tvm_env.parse_target(args.target)
    tvm_env.setup(target)
    mod = operator_task(args.workload).mod
    table = Table(title=f"first drafts of {args.workload}, population {args.population} (seconds)")
    columns = ("drafts at once", "threads each", "each draft", "all", "drafts a minute", "cores busy")
    for col in (*columns, "PSA scored, each", "walked, all"):
        table.add_column(col, justify="right")
    lines = []
    pool = WalkPool(default_walk_workers() if args.walk_workers is None else args.walk_workers)
    for threads in args.threads:
        for concurrent in args.concurrent:
            # one walk pool, but a cache of PSA's walks of its own: a configuration drafting what an
            # earlier one drafted (the same seeds) must not find its scores cached
            draft = PSACostModel(device="h100", features=FeatureCache(pool=pool))
            seconds, scored, wall, cores = draft_at_once(
                mod,
                target,
                draft,
                concurrent,
                threads or "physical",
                args.population,
                args.seed,
                args.first_min_samples,
            )
            walked = len(draft.features)  # distinct schedules PSA walked, all K drafts together
            table.add_row(
                str(concurrent),
                str(threads or "all"),
                " ".join(f"{s:.1f}" for s in seconds),
                f"{wall:.1f}",
                f"{60 * concurrent / wall:.1f}",
                f"{cores:.1f}",
                " ".join(str(n) for n in scored),
                str(walked),
            )
            print(f"K={concurrent} T={threads}: {wall:.1f} s, {cores:.1f} cores, walked {walked}", flush=True)
            lines.append(
                {
                    "concurrent": concurrent,
                    "threads": threads,
                    "seconds": seconds,
                    "scored": scored,
                    "walked": walked,
                    "wall_s": wall,
                    "cores": cores,
                }
            )
    pool.close()
    Console(width=150).print(table)
    return lines


if __name__ == "__main__":
    main()
