"""Ending TVM's `PopenPoolExecutor`s on purpose rather than when they are garbage collected.

A `PopenPoolExecutor` that is never shut down ends in its `__del__`, which shuts it down and joins its
threads wherever the garbage collector happens to run: inside another executor's locks, on a thread
that one of the pool's own futures is waiting for. `end_pool` shuts one down at once instead, and the
project's pool owners (`PooledLocalBuilder.shutdown`, `StartedRunner.shutdown`, `WalkPool.close`)
call it, as does a tuning run for the pools it started (`bridge.tuning.tune_tasks`).
"""

from __future__ import annotations

from typing import Any

__all__ = ["end_pool"]


def end_pool(pool: Any) -> None:
    """Shut a `PopenPoolExecutor` down without waiting (None: nothing to do). Work not started is
    cancelled (a queued call would start a fresh worker process after the kill), the worker processes
    are killed, and the pool's idle threads end by themselves."""
    if pool is None:
        return
    pool._threadpool.shutdown(wait=False, cancel_futures=True)
    pool.shutdown(wait=False)
