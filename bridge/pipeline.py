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
`post_tuning` wait for the whole job. A pipeline runs one search at a time for all tasks of a run;
with `build_apart`, a task's `generate_measure_candidates` waits only for its own jobs, and the
next job's search may run while the last job's builds finish. The FFI releases the GIL, so the
drafting's C++ evolution and the walk's worker processes run in parallel with the builder's.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

from tvm.ir.utils import derived_object

from data.features import schedule_key
from tvm_env import ms

__all__ = ["STRAGGLER_SHARE", "Pipeline", "PrefetchBuilder", "wait_most"]

log = logging.getLogger(__name__)


STRAGGLER_SHARE = 0.9
"""`PrefetchBuilder`'s patience starts once this share of a batch is built."""


def wait_most(futures: Sequence[Future], grace: float | None) -> tuple[list[int], list[int]]:
    """Wait for `futures` until all are done or, with `grace`, until the first `STRAGGLER_SHARE` of
    them took t seconds and another `grace` x t passed; (indices done, indices still running)."""
    start, pending, cutoff = time.perf_counter(), set(futures), None
    need = math.ceil(STRAGGLER_SHARE * len(futures))
    while pending:
        timeout = None if cutoff is None else max(0.0, cutoff - time.perf_counter())
        finished, pending = wait(pending, timeout=timeout, return_when=FIRST_COMPLETED)
        if not finished:
            break
        if grace is not None and cutoff is None and len(futures) - len(pending) >= need:
            cutoff = time.perf_counter() + grace * (time.perf_counter() - start)
    return [i for i, f in enumerate(futures) if f not in pending], [i for i, f in enumerate(futures) if f in pending]


@derived_object
class PrefetchBuilder(ms.builder.PyBuilder):
    """A builder that can build a batch ahead of time (`prefetch`), then hands those results out when
    MetaSchedule asks for the same schedules (matched by `data.features.schedule_key`).

    With a builder that can start a batch without waiting for it (`submit` and `finish`, as
    `tvm_env.PooledLocalBuilder` has) and a `straggler_grace`, `prefetch` does not wait for a batch's
    slowest builds: once `STRAGGLER_SHARE` of the batch is built in t seconds, it waits at most
    `straggler_grace` x t more and reports the picks still building, whose builds go on; a later
    `prefetch` or `build` of the same schedules takes them over. A batch of 64 otherwise waited on
    a kernel or two that took 5-15 s to compile while the rest took 2-4 s (docs/benchmarks.md).

    `start` begins a batch without waiting for it, so that a search can run while it builds
    (`DraftVerifySearch.search_ahead`); the `prefetch` of the same schedules then waits for it.

    Thread-safe: `start` and `prefetch` (background) and `build` (main thread) take one lock; a
    `build` takes over what is still building before it builds anything itself.

    Attributes:
        last_batch: the wrapped builder's `last_batch` (`tvm_env.builder.BATCH_KEYS`) for what the
            last `prefetch`, or the last `build` that built anything, built; {} if it tells nothing.
        built_batch: the same for the last `build` alone ({} when it built nothing itself): MetaSchedule's
            loop reads it after its `build` returns, when a `prefetch` may have set `last_batch` since.
    """

    def __init__(self, *, builder: Any, straggler_grace: float | None = None):
        """
        Args:
            builder: the MetaSchedule builder that builds (e.g. `tvm_env.PooledLocalBuilder`).
            straggler_grace: see the class docstring (None: wait for every build of a batch).
        """
        super().__init__()
        if straggler_grace is not None and not straggler_grace >= 0:
            raise ValueError(f"straggler_grace={straggler_grace!r} must be >= 0 (None: wait for every build)")
        self.builder, self.straggler_grace = builder, straggler_grace
        self.hits = self.misses = 0
        self.last_batch: dict[str, float] = {}
        self.built_batch: dict[str, float] = {}
        self._built: dict[int, Any] = {}
        self._running: dict[int, Future] = {}  # builds started and not yet taken (`start`, a prefetch's stragglers)
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="pruner-build")  # `start` without `submit`
        self._lock = threading.Lock()

    def start(self, mods: Sequence[Any], target: Any) -> None:
        """Start building `mods` for `target` and return at once; a later `prefetch` (or `build`) of
        the same schedules waits for them. A builder without `submit` builds them on a thread of
        this builder's own, the batch in one call."""
        keys = [schedule_key(m) for m in mods]
        with self._lock:
            todo, seen = [], set(self._built) | set(self._running)
            for i, k in enumerate(keys):  # a schedule twice in `mods` is built once
                if k not in seen:
                    seen.add(k)
                    todo.append(i)
            if not todo:
                return
            inputs = [ms.builder.BuilderInput(mods[i], target) for i in todo]
            if hasattr(self.builder, "submit"):
                futures = self.builder.submit(inputs)
            else:
                futures = [Future() for _ in todo]
                self._thread.submit(_build_into, self.builder, inputs, futures)
            for i, future in zip(todo, futures):
                self._running[keys[i]] = future

    def prefetch(self, mods: Sequence[Any], target: Any) -> tuple[float, list[int], dict[str, float]]:
        """Build `mods` for `target` now (or wait for what `start` began) and keep the results;
        (seconds it took, the indices of `mods` still building when it returned: none without a
        `straggler_grace`, and the wrapped builder's `last_batch` as this call took it, under the
        lock: `last_batch` itself may be another caller's by the time this one reads it)."""
        start = time.perf_counter()
        keys = [schedule_key(m) for m in mods]
        self.start(mods, target)
        with self._lock:
            waiting = [i for i, k in enumerate(keys) if k in self._running]
            # one future a schedule: a repeat in `mods` waits on its one build (its pop was a KeyError)
            futures = {keys[i]: self._running[keys[i]] for i in waiting}
        order = list(futures)
        # not under the lock: MetaSchedule's `build` of the batch on the device (built already) must not
        # wait for this one
        done, _ = wait_most([futures[k] for k in order], self.straggler_grace)
        done_keys = {order[j] for j in done}
        with self._lock:  # what a `build` took over meanwhile is no longer ours to take
            taken = [k for k in order if k in done_keys and self._running.get(k) is futures[k]]
            results = self._finish([self._running.pop(k) for k in taken])
            self._built.update(zip(taken, results))
            self.last_batch = stats = dict(getattr(self.builder, "last_batch", {}))
        return time.perf_counter() - start, [i for i in waiting if keys[i] not in done_keys], stats

    def _finish(self, futures: Sequence[Future]) -> list:
        if hasattr(self.builder, "finish"):
            return self.builder.finish(futures)
        return [f.result() for f in futures]

    def build(self, build_inputs):
        keys = [schedule_key(b.mod) for b in build_inputs]
        with self._lock:
            out = [self._built.pop(k, None) for k in keys]
            todo = [i for i, r in enumerate(out) if r is None]
            self.hits += len(out) - len(todo)
            self.misses += len(todo)
            self.last_batch = {}
            # builds a prefetch left going, each taken once: a repeat in the batch is built afresh, as a
            # repeat of a built one is, so that no two results share a build folder (each is removed)
            first_at: dict[int, int] = {}
            for i in todo:
                if keys[i] in self._running:
                    first_at.setdefault(keys[i], i)
            running = list(first_at.values())
            fresh = [i for i in todo if first_at.get(keys[i]) != i]
            told: dict[str, float] = {}  # the builder's figures of both parts, added up
            if running:
                for i, result in zip(running, self._finish([self._running.pop(keys[i]) for i in running])):
                    out[i] = result
                if hasattr(self.builder, "finish"):  # it told what the taken-over builds cost
                    told = _added(told, getattr(self.builder, "last_batch", {}))
            if fresh:
                for i, result in zip(fresh, self.builder.build([build_inputs[i] for i in fresh])):
                    out[i] = result
                told = _added(told, getattr(self.builder, "last_batch", {}))
            self.built_batch = told
            if todo:
                self.last_batch = self.built_batch
        return out

    def discard(self) -> None:
        """Remove the artifacts of prefetched builds nobody asked for (e.g. after a deadline); builds
        still running are waited for, so that the builder is idle for whoever uses it next."""
        with self._lock:
            running, self._running = list(self._running.values()), {}
            results = [*self._built.values(), *(self._finish(running) if running else [])]
            for result in results:
                if result.error_msg is None and result.artifact_path:
                    shutil.rmtree(os.path.dirname(str(result.artifact_path)), ignore_errors=True)
            self._built.clear()


def _added(a: Mapping[str, float], b: Mapping[str, float]) -> dict[str, float]:
    """Two batches' builder figures (`tvm_env.builder.BATCH_KEYS`, each a sum over picks) as one's."""
    return {k: a.get(k, 0.0) + b.get(k, 0.0) for k in {**a, **b}}


def _build_into(builder: Any, inputs: list, futures: Sequence[Future]) -> None:
    """`builder.build(inputs)`, its results (or its error) set on `futures`, one an input."""
    try:
        results = builder.build(inputs)
    except BaseException as err:  # the waiter re-raises it
        for future in futures:
            future.set_exception(err)
        return
    for future, result in zip(futures, results):
        future.set_result(result)


class Pipeline:
    """One background worker shared by the search strategies of every task of a tuning run.

    A job is a search, then (optionally) the wait for its picks' builds. By default a job runs whole
    on the worker, and `submit` waits for the job before it. With `build_apart`, the build part of a
    job runs on a second thread, so the worker searches for the next job (another task's, in a
    network) while the builds of the last one finish; `submit` queues the job and returns, and a task
    waits only for its own jobs (`join(upto=...)`), not for another task's (`DraftVerifySearch`).

    Attributes:
        builder: where picks are built ahead (None: only the search runs ahead).
        build_apart: see above.
    """

    def __init__(self, builder: PrefetchBuilder | None = None, *, build_apart: bool = False):
        self.builder, self.build_apart = builder, build_apart
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="pruner-search")
        self._waiter = ThreadPoolExecutor(1, thread_name_prefix="pruner-build-wait") if build_apart else None
        self._jobs: list[tuple[Future, threading.Event]] = []  # each job's end and its search's end, in order
        self._draft_slots: threading.BoundedSemaphore | None = None

    def draft_slots(self, n: int) -> threading.BoundedSemaphore:
        """The run's bound on first drafts at once (`DraftVerifySearch.first_drafts_ahead`): one
        semaphore of `n` slots, made by the first task that asks, shared by every task of the run."""
        if self._draft_slots is None:
            self._draft_slots = threading.BoundedSemaphore(n)
        return self._draft_slots

    def submit(self, search: Callable[[], Any], build: Callable[[Any], None] | None = None) -> Future:
        """Run `search()` in the background, then `build(its result)`; a future of the whole job. Jobs
        run in the order submitted; without `build_apart` the job in flight is joined first.
        `join_search` waits for the search parts only."""
        if not self.build_apart:
            self.join()
        searched, done = threading.Event(), Future()

        def job() -> None:
            try:
                result = search()
            except BaseException as err:  # the joiner re-raises it
                searched.set()
                done.set_exception(err)
                return
            searched.set()
            if self._waiter is None:
                _finish_job(build, result, done)
            else:
                self._waiter.submit(_finish_job, build, result, done)

        self._executor.submit(job)
        self._jobs.append((done, searched))
        return done

    def join_search(self) -> float:
        """Wait until the search part of every job submitted is done (their builds may go on);
        re-raises what a job that ended raised. Returns the seconds waited."""
        if not self._jobs:
            return 0.0
        start = time.perf_counter()
        self._jobs[-1][1].wait()  # the searches run in turn: the last one's end is every one's
        for done, _ in list(self._jobs):
            if done.done() and done.exception() is not None:
                self._jobs = [job for job in self._jobs if job[0] is not done]
                done.result()
        return time.perf_counter() - start

    def join(self, upto: Future | None = None) -> float:
        """Wait for the jobs in flight, all of them or those submitted up to `upto` (a job `submit`
        returned; nothing if it was joined already); re-raises what a job raised. Returns the seconds
        waited."""
        if not self._jobs or (upto is not None and all(done is not upto for done, _ in self._jobs)):
            return 0.0
        start = time.perf_counter()
        while self._jobs:
            done, _ = self._jobs.pop(0)
            done.result()
            if done is upto:
                break
        return time.perf_counter() - start

    def close(self) -> None:
        """Join the jobs in flight and drop unused prefetched builds."""
        try:
            self.join()
        finally:
            if self.builder is not None:
                self.builder.discard()


def _finish_job(build: Callable[[Any], None] | None, result: Any, done: Future) -> None:
    """The build part of a job (if any) on `result`, then `done` set (or its error)."""
    try:
        if build is not None:
            build(result)
    except BaseException as err:
        done.set_exception(err)
        return
    done.set_result(None)
