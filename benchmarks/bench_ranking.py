"""Time the ranking metrics' compute() and the ranking losses' forward + backward on CPU.

    python benchmarks/bench_ranking.py [--threads 1] [--repeats 3]

Prints a markdown table (best of `repeats`, wall and process CPU seconds) for docs/benchmarks.md.
Metric cases: 100k records in 1000 tasks (the target size) and 100k records in 25 tasks of 4000
(TenSet-sized tasks). Loss cases: a 512-record batch of 4 tasks and a 2048-record batch of 8.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import torch
from jsonargparse import CLI

from pruner_models.losses import LOSSES
from pruner_models.metrics import (
    KendallTau,
    PairwiseAccuracy,
    PeakScore,
    TopKRecall,
    ranking_metrics,
)


def best_of(fn: Callable[[], object], repeats: int) -> tuple[float, float]:
    """Best wall and process-CPU seconds of `fn` over `repeats` runs."""
    wall, cpu = float("inf"), float("inf")
    for _ in range(repeats):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall, cpu = min(wall, time.perf_counter() - w0), min(cpu, time.process_time() - c0)
    return wall, cpu


def records(n: int, n_tasks: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    task = torch.randint(0, n_tasks, (n,), generator=gen)
    labels = torch.rand(n, generator=gen)
    return labels + 0.3 * torch.randn(n, generator=gen), labels, task


def bench_ranking(threads: int = torch.get_num_threads(), repeats: int = 3) -> None:
    """Time the ranking metrics' compute() and the ranking losses' forward + backward on CPU.

    Args:
        threads: torch intra-op threads.
        repeats: best of this many runs (the losses: of 3x as many).
    """
    torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(0)
    print(f"torch {torch.__version__}, {threads} thread(s), load average {os.getloadavg()[0]:.1f}")
    print("| case | what | wall s | CPU s |\n|---|---|---|---|")

    metric_makers = {
        "PairwiseAccuracy": PairwiseAccuracy,
        "PeakScore(5)": lambda: PeakScore(k=5),
        "TopKRecall(5)": lambda: TopKRecall(k=5),
        "KendallTau": KendallTau,
        "ranking_metrics (all 6)": ranking_metrics,
    }
    for n, n_tasks in ((100_000, 1000), (100_000, 25)):
        data = records(n, n_tasks, gen)
        for name, make in metric_makers.items():

            def compute(make=make, data=data) -> None:
                metric = make()
                metric.update(*data)
                metric.compute()

            wall, cpu = best_of(compute, repeats)
            print(f"| {n // 1000}k records, {n_tasks} tasks | {name} update+compute | {wall:.3f} | {cpu:.3f} |")

    for batch, n_tasks in ((512, 4), (2048, 8)):
        preds, labels, _ = records(batch, n_tasks, gen)
        task = torch.arange(n_tasks).repeat_interleave(batch // n_tasks)
        preds.requires_grad_(True)
        for name, loss_fn in LOSSES.items():

            def step(loss_fn=loss_fn, preds=preds, labels=labels, task=task) -> None:
                loss_fn(preds, labels, task).backward()

            wall, cpu = best_of(step, repeats * 3)
            print(f"| batch {batch}, {n_tasks} tasks | {name} forward+backward | {wall:.4f} | {cpu:.4f} |")


def main(argv: list[str] | None = None) -> None:
    """`argv` None reads sys.argv."""
    CLI(bench_ranking, args=argv, as_positional=False)


if __name__ == "__main__":
    main()
