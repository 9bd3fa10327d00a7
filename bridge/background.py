"""One job at a time on a thread of its own, waited for before what depends on it reads its result.

`PrunerCostModel` trains on a measured batch this way (`background=True`) while the next batch is
searched, built and run, and warms CUDA up this way (`warm_up_cuda`) while the first batch is; its scoring waits
for the job first, so it scores with the network the job left.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import torch

__all__ = ["BackgroundJob", "warm_up_cuda"]


class BackgroundJob:
    """A worker thread that runs one job at a time.

    Attributes:
        waited_s: seconds `wait` spent waiting for jobs not yet done.
    """

    def __init__(self, name: str):
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=name)
        self._job: Future | None = None
        self.waited_s = 0.0

    def submit(self, job: Callable[[], object]) -> None:
        """Run `job()` on the thread, after the job in flight (which is waited for first)."""
        self.wait()
        self._job = self._executor.submit(job)

    def wait(self) -> None:
        """Wait for the job in flight, if any; re-raises what it raised (once)."""
        job, self._job = self._job, None
        if job is None:
            return
        start = time.perf_counter()
        try:
            job.result()
        finally:
            self.waited_s += time.perf_counter() - start

    @property
    def running(self) -> bool:
        """Whether a job was submitted and is not done yet."""
        return self._job is not None and not self._job.done()


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
