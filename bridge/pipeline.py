"""Pipelined rounds: the next batch is searched, and built, while the current batch builds and runs.

MetaSchedule's task scheduler runs one task's rounds strictly in turn: search, build, run, then
update the cost model, then search again. The device sits idle during the search and the build,
the host's cores during the run. A strategy with a `Pipeline` (`bridge.draft_verify`) instead
starts the search of round k+1 on a background thread as soon as it has handed out round k, and,
with a `PrefetchBuilder`, builds round k+1's picks there too, so that round k+1 reaches the
runner as soon as round k's results are in. The price: round k+1 is chosen by the cost model as it
was before round k's results (one round of staleness).

The rule that keeps this safe: the search part of a background job never runs together with
anything of MetaSchedule's but the builder and runner of the current round. A job is a search,
then (optionally) a build; `notify_runner_results`, which MetaSchedule calls BEFORE its measure
callbacks update the cost model and the database, waits for the search part (`join_search`), so the
build of the next batch may go on while the model updates; `generate_measure_candidates` and
`post_tuning` wait for the whole job. A pipeline runs one job at a time for all tasks of a run. The FFI releases the GIL, so the
drafting's C++ evolution and the walk's worker processes run in parallel with the builder's.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from tvm.ir.utils import derived_object

from data.features import schedule_key
from tvm_env import ms

__all__ = ["Pipeline", "PrefetchBuilder"]

log = logging.getLogger(__name__)


@derived_object
class PrefetchBuilder(ms.builder.PyBuilder):
    """A builder that can build a batch ahead of time (`prefetch`), then hands those results out when
    MetaSchedule asks for the same schedules (matched by `data.features.schedule_key`).

    Thread-safe: `prefetch` (background) and `build` (main thread) never build at the same time.
    """

    def __init__(self, *, builder: Any):
        """
        Args:
            builder: the MetaSchedule builder that builds (e.g. `tvm_env.PooledLocalBuilder`).
        """
        super().__init__()
        self.builder = builder
        self.hits = self.misses = 0
        self._built: dict[int, Any] = {}
        self._lock = threading.Lock()

    def prefetch(self, mods: Sequence[Any], target: Any) -> float:
        """Build `mods` for `target` now and keep the results; returns the seconds it took."""
        start = time.perf_counter()
        keys = [schedule_key(m) for m in mods]
        with self._lock:
            results = self.builder.build([ms.builder.BuilderInput(m, target) for m in mods])
            self._built.update(zip(keys, results))
        return time.perf_counter() - start

    def build(self, build_inputs):
        keys = [schedule_key(b.mod) for b in build_inputs]
        with self._lock:
            out = [self._built.pop(k, None) for k in keys]
            todo = [i for i, r in enumerate(out) if r is None]
            self.hits += len(out) - len(todo)
            self.misses += len(todo)
            if todo:
                for i, result in zip(todo, self.builder.build([build_inputs[i] for i in todo])):
                    out[i] = result
        return out

    def discard(self) -> None:
        """Remove the artifacts of prefetched builds nobody asked for (e.g. after a deadline)."""
        with self._lock:
            for result in self._built.values():
                if result.error_msg is None and result.artifact_path:
                    shutil.rmtree(os.path.dirname(str(result.artifact_path)), ignore_errors=True)
            self._built.clear()


class Pipeline:
    """One background worker shared by the search strategies of every task of a tuning run.

    Attributes:
        builder: where picks are built ahead (None: only the search runs ahead).
    """

    def __init__(self, builder: PrefetchBuilder | None = None):
        self.builder = builder
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="pruner-search")
        self._job: Future | None = None
        self._searched = threading.Event()

    def submit(self, search: Callable[[], Any], build: Callable[[Any], None] | None = None) -> None:
        """Run `search()` in the background, then `build(its result)` (after the job in flight, which
        is joined first). `join_search` waits for the first part only."""
        self.join()
        self._searched.clear()

        def job() -> None:
            try:
                result = search()
            finally:
                self._searched.set()
            if build is not None:
                build(result)

        self._job = self._executor.submit(job)

    def join_search(self) -> float:
        """Wait until the search part of the job in flight is done (its build may go on); re-raises
        what the job raised if it ended. Returns the seconds waited."""
        if self._job is None:
            return 0.0
        start = time.perf_counter()
        self._searched.wait()
        if self._job.done():
            self._job.result()
        return time.perf_counter() - start

    def join(self) -> float:
        """Wait for the job in flight, if any; re-raises what it raised. Returns the seconds waited."""
        job, self._job = self._job, None
        if job is None:
            return 0.0
        start = time.perf_counter()
        job.result()
        return time.perf_counter() - start

    def close(self) -> None:
        """Join the job in flight and drop unused prefetched builds."""
        try:
            self.join()
        finally:
            if self.builder is not None:
                self.builder.discard()
