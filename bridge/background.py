"""Jobs run in turn on a thread of their own, waited for before what depends on them reads their result.

`PrunerCostModel` trains on a measured batch this way (`background=True`), and then writes its
state, while the next batch is searched, built and run; it warms CUDA up this way (`warm_up_cuda`)
while the first batch is. Its scoring waits for the jobs first, so it scores with the network they left.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import torch

__all__ = ["BackgroundJobs", "warm_up_cuda"]


class BackgroundJobs:
    """A worker thread that runs the jobs submitted to it one at a time, in the order submitted.

    Attributes:
        waited_s: seconds `wait` spent waiting for jobs not yet done.
    """

    def __init__(self, name: str):
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=name)
        self._jobs: list[Future] = []
        self.waited_s = 0.0

    def submit(self, job: Callable[[], object]) -> None:
        """Run `job()` on the thread once the jobs submitted before it are done; returns at once."""
        self._jobs = [j for j in self._jobs if not j.done() or j.exception() is not None]
        self._jobs.append(self._executor.submit(job))

    def wait(self) -> None:
        """Wait for every job submitted so far; re-raises (once) the first error one of them raised."""
        jobs, self._jobs = self._jobs, []
        if not jobs:
            return
        start = time.perf_counter()
        try:
            for job in jobs:
                job.exception()  # waits
        finally:
            self.waited_s += time.perf_counter() - start
        for job in jobs:
            if job.exception() is not None:
                raise job.exception()

    def pending(self) -> list[Future]:
        """The jobs submitted since the last `wait` and not done yet (what a caller that must outlive
        them waits on, e.g. with `concurrent.futures.wait`; `wait` waits for them and raises their errors)."""
        return [j for j in self._jobs if not j.done()]

    @property
    def running(self) -> bool:
        """Whether a job submitted is not done yet."""
        return any(not j.done() for j in self._jobs)


def warm_up_cuda(device: torch.device) -> None:
    """One small training step on `device`, so that a run's first update does not pay the seconds
    of CUDA's start-up (context, cuBLAS, autograd kernels): a cost model runs it as a job while the
    first batch is searched, built and run."""
    try:
        net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)).to(device)
        optimizer = torch.optim.Adam(net.parameters())
        net(torch.randn(256, 64, device=device)).square().mean().backward()
        optimizer.step()
        torch.cuda.synchronize(device)
    except Exception:  # a warm-up is an optimization: the first update reports a real problem
        pass
