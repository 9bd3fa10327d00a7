"""The collector's measuring loop: sampled schedules in, committed run_secs out, in sampling order.

Two ways, same contract (`measure_sequential`, `measure_pipelined`):

* sequential (the collector's first way, `--sequential`): sample a task, and whenever a batch is
  full, build the whole batch, then run it, then commit it. Every stage waits for the others.
* pipelined (the default): a sampler thread draws the next tasks' schedules while the main thread
  keeps the build pool (`data.measure.BuildPool`) supplied with chunks of candidates, runner
  threads (one per runner of `data.measure.make_runners`: per GPU, or one RPC runner with a session
  per server) run each chunk as soon as its builds are done, and the main thread commits the
  chunks in order. TVM's FFI calls release the GIL (tvm_ffi's default), so the sampler's C++
  evolution, the build workers and the runner's worker processes proceed side by side.

With `overlap=False` ("quiet runs", the default for a CPU target measured on this machine) a run
waits until no build or sampling is in flight and blocks new ones meanwhile, so CPU timings are
not taken on cores busy with compilers; sampling still overlaps building.

The caller's `groups` iterator yields one list of `(payload, schedule)` per task (it runs in the
sampler thread when pipelined); `commit` gets one chunk's `(item, candidate, run_secs)` at a
time, always in the order the items were sampled. A stop (`stopping()` turns true: a signal or the
deadline) starts no new run: runs in progress finish and are committed, chunks whose run has not
started are dropped (their items are never committed, so a rerun samples them again), and the
sampling in progress finishes before the call returns.
"""

from __future__ import annotations

import contextlib
import dataclasses
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from data.labels import mean_latency
from data.measure import BuildPool, Measurer, make_runners, run_built
from tvm_env import ms, tvm, usable_cores

if TYPE_CHECKING:
    from data.collect import CollectConfig

__all__ = ["StageTimes", "map_ahead", "measure_pipelined", "measure_sequential"]

Item = tuple[Any, "tvm.s_tir.Schedule"]
Commit = Callable[[list[tuple[Item, ms.MeasureCandidate, list[float] | None]]], None]  # None: refused


@dataclasses.dataclass
class StageTimes:
    """Where a collection's time went, in seconds of wall time.

    `build_s` is the time the build pool was busy: its workers' build seconds / `builders`
    (pipelined), the build phases' wall time (sequential). `run_s` sums the runners' busy time.
    `first_commit_s`: from the start to the first chunk stored (worker start-up included).
    """

    wall_s: float = 0.0
    sample_s: float = 0.0
    build_s: float = 0.0
    run_s: float = 0.0
    commit_s: float = 0.0
    first_commit_s: float = 0.0
    builders: int = 1
    runners: int = 1
    records: int = 0
    valid: int = 0
    refused: int = 0  # candidates the source guard refused to build (`--max-source-kb`; not stored)

    @property
    def run_share(self) -> float:
        """Share of the wall time the runners were busy (1.0: always, all of them)."""
        return self.run_s / (self.wall_s * self.runners) if self.wall_s else 0.0

    @property
    def build_share(self) -> float:
        """Share of the wall time the build pool was busy."""
        return self.build_s / self.wall_s if self.wall_s else 0.0

    def summary(self) -> str:
        return (
            f"time: sample {self.sample_s:.0f} s, build {self.build_s:.0f} s (pool busy {self.build_share:.0%}), "
            f"run {self.run_s:.0f} s (runners busy {self.run_share:.0%}), commit {self.commit_s:.1f} s"
        )


def map_ahead(fn: Callable[[Any], Any], items: Iterable[Any], workers: int) -> Iterator[Any]:
    """`fn(item)` for each item, yielded in the items' order, with up to `workers` calls running ahead
    of the consumer on threads (the collector samples several tasks at once this way: the sampler's
    C++ evolution releases the GIL). One worker: a plain `map`, in the caller's thread. Closing the
    generator cancels the calls not started and waits for the ones running, so none outlives it."""
    if workers <= 1:
        yield from map(fn, items)
        return
    ahead: deque[Future] = deque()
    with ThreadPoolExecutor(workers, thread_name_prefix="collect-sample") as pool:
        try:
            for item in items:
                ahead.append(pool.submit(fn, item))
                if len(ahead) >= workers:
                    yield ahead.popleft().result()
            while ahead:
                yield ahead.popleft().result()
        finally:
            for future in ahead:
                future.cancel()


def _candidate(sch: tvm.s_tir.Schedule) -> ms.MeasureCandidate:
    return ms.MeasureCandidate(sch, ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True))


def _commit(commit: Commit, times: StageTimes, rows: list, began: float) -> None:
    """Hand a measured chunk to `commit`, refused candidates (run_secs None) too: it stores none of them."""
    start = time.perf_counter()
    if not times.records and not times.refused:
        times.first_commit_s = start - began
    commit(rows)
    times.commit_s += time.perf_counter() - start
    measured = [secs for _, _, secs in rows if secs is not None]
    times.records += len(measured)
    times.refused += len(rows) - len(measured)
    times.valid += sum(mean_latency(secs) != float("inf") for secs in measured)


def default_chunk(cfg: CollectConfig, overlap: bool) -> int:
    """Candidates per build/run chunk: `--batch-size`, else 2x the build workers when runs overlap
    builds (small chunks keep the runner fed), else 128 (sequential, or runs that wait for an idle
    pool: each chunk then costs one drain of the pool, as a sequential batch does)."""
    if cfg.batch_size:
        return cfg.batch_size
    return 2 * (cfg.builder_workers or usable_cores()) if overlap and not cfg.sequential else 128


def measure_sequential(
    groups: Iterable[list[Item]],
    commit: Commit,
    cfg: CollectConfig,
    target: tvm.target.Target,
    stopping: Callable[[], bool],
    times: StageTimes,
    runners: int = 1,
) -> None:
    """Sample, then build and run each full batch of `cfg.batch_size` (128), then commit it."""
    size = default_chunk(cfg, overlap=False)
    times.builders, times.runners = cfg.builder_workers or usable_cores(), 1
    measurer: Measurer | None = None  # started on the first batch: a finished dataset needs none
    pending: list[Item] = []
    start = time.perf_counter()

    def flush(min_size: int) -> None:
        nonlocal measurer
        while pending and len(pending) >= min_size and not stopping():
            measurer = measurer or Measurer(cfg, target, runners)
            batch = pending[:size]
            candidates = [_candidate(sch) for _, sch in batch]
            secs = measurer.measure(candidates)
            times.build_s, times.run_s = measurer.build_s, measurer.run_s
            _commit(commit, times, list(zip(batch, candidates, secs)), start)
            del pending[: len(batch)]

    try:
        it = iter(groups)
        while True:
            t0 = time.perf_counter()
            group = next(it, None)
            times.sample_s += time.perf_counter() - t0
            if group is None:
                break
            pending.extend(group)
            flush(size)
        flush(1)
    finally:
        if measurer is not None:
            measurer.close()
        times.wall_s = time.perf_counter() - start


@dataclasses.dataclass
class _Chunk:
    index: int
    items: list[Item]
    candidates: list[ms.MeasureCandidate]
    builds: list  # concurrent.futures.Future[BuilderResult], one per candidate


def _discard(built: list[ms.builder.BuilderResult]) -> None:
    for b in built:
        if b.artifact_path:
            ms.utils.remove_build_dir(b.artifact_path)


def measure_pipelined(
    groups: Iterable[list[Item]],
    commit: Commit,
    cfg: CollectConfig,
    target: tvm.target.Target,
    stopping: Callable[[], bool],
    times: StageTimes,
    runners: int = 1,
    overlap: bool = True,
) -> None:
    """Sample, build, run and commit at once (module docstring); commits in sampling order."""
    size = default_chunk(cfg, overlap)
    workers = cfg.builder_workers or usable_cores()
    times.builders, times.runners = workers, runners
    sampled: queue.Queue[list[Item]] = queue.Queue(maxsize=2)  # tasks sampled ahead of the builds
    to_run: queue.Queue[_Chunk | None] = queue.Queue()
    done: queue.Queue[tuple[int, Any]] = queue.Queue()
    errors: list[BaseException] = []
    quit_, sampler_done, paused = threading.Event(), threading.Event(), threading.Event()
    quiet = contextlib.nullcontext() if overlap else threading.Lock()  # a run, or one task's sampling
    pool: BuildPool | None = None
    threads: list[threading.Thread] = []
    started: list[ms.runner.Runner] = []
    timing = threading.Lock()

    def sampler() -> None:
        it = iter(groups)
        try:
            while not quit_.is_set():
                with quiet:
                    t0 = time.perf_counter()
                    group = next(it, None)
                    with timing:
                        times.sample_s += time.perf_counter() - t0
                if group is None:
                    break
                while not quit_.is_set():
                    try:
                        sampled.put(group, timeout=0.1)
                        break
                    except queue.Full:
                        continue
        except BaseException as err:  # re-raised by the main thread
            errors.append(err)
        finally:
            sampler_done.set()

    def run_loop(runner: ms.runner.Runner) -> None:
        while (chunk := to_run.get()) is not None:
            try:
                built = [f.result() for f in chunk.builds]
                if stopping() or quit_.is_set():  # a stop starts no new run
                    _discard(built)
                    done.put((chunk.index, None))
                    continue
                with quiet:
                    try:
                        if not overlap:
                            paused.set()
                            pool.wait_idle()
                        t0 = time.perf_counter()
                        secs = run_built(runner, target, chunk.candidates, built)
                        with timing:
                            times.run_s += time.perf_counter() - t0
                    finally:
                        paused.clear()
                done.put((chunk.index, secs))
            except BaseException as err:
                done.put((chunk.index, err))

    def start_runners() -> None:
        started.extend(make_runners(cfg, target, runners))
        for runner in started:
            thread = threading.Thread(target=run_loop, args=(runner,), name="collect-runner", daemon=True)
            thread.start()
            threads.append(thread)

    pending: deque[Item] = deque()
    chunks: dict[int, _Chunk] = {}
    results: dict[int, Any] = {}
    next_index = next_commit = 0
    start = time.perf_counter()
    sampling = threading.Thread(target=sampler, name="collect-sampler", daemon=True)
    sampling.start()
    clean = False
    try:
        while True:
            if errors:
                raise errors[0]
            while len(pending) < size:
                try:
                    pending.extend(sampled.get_nowait())
                except queue.Empty:
                    break
            sampled_all = sampler_done.is_set() and sampled.empty()
            stop = stopping()
            if stop and not quit_.is_set():
                quit_.set()
                if pool is not None:
                    pool.cancel_pending()  # chunks whose run has not started are dropped anyway
            while (
                not stop
                and not paused.is_set()
                and pending
                and (len(pending) >= size or sampled_all)
                and len(chunks) < runners + 2
                and (pool is None or pool.outstanding < size)
            ):
                items = [pending.popleft() for _ in range(min(size, len(pending)))]
                candidates = [_candidate(sch) for _, sch in items]
                first = pool is None
                pool = pool or BuildPool(workers, cfg.timeout, max_source_kb=cfg.max_source_kb)
                chunk = _Chunk(next_index, items, candidates, [pool.submit(c.sch.mod, target) for c in candidates])
                chunks[next_index], next_index = chunk, next_index + 1
                to_run.put(chunk)
                if first:
                    start_runners()  # their workers start while the first chunk builds
            try:
                index, out = done.get(timeout=0.05)
            except queue.Empty:
                index = None
            if index is not None:
                if isinstance(out, BaseException):
                    raise out
                results[index] = out
                while next_commit in results:
                    chunk, secs = chunks.pop(next_commit), results.pop(next_commit)
                    if secs is not None:
                        _commit(commit, times, list(zip(chunk.items, chunk.candidates, secs)), start)
                    next_commit += 1
            if not chunks and (stop or (sampled_all and not pending)):
                break
        clean = True
    finally:
        quit_.set()
        for _ in threads:
            to_run.put(None)
        if clean:  # wait for the sampling in progress, so no task folder is written after we return
            sampling.join()
            for thread in threads:
                thread.join()
        if pool is not None:
            with timing:
                times.build_s = pool.busy_s / workers
            pool.shutdown()
        for runner in started:
            runner.pool.shutdown(wait=False)
        times.wall_s = time.perf_counter() - start
