"""Builders that do not pay TVM's start-up per batch.

* The default `LocalBuilder` re-imports the tensor intrinsics in each fresh worker; `fast_build` is
  a module-level builder function that does not (workers import it by reference).
* `LocalBuilder` also starts a fresh process pool for every batch, and each worker pays the whole
  `import tvm` (2-14 s, torch included) before building one batch of kernels that take ~0.1 s each;
  `PooledLocalBuilder` keeps its workers for `reuse_batches` batches, and starts the pool that
  replaces them in the background a few batches ahead, so no batch waits for 16 fresh workers to
  import TVM.
* For CUDA, `fast_build` compiles with `tvm_env.nvrtc`: about 1 s less a candidate than TVM's
  NVRTC compile, which parses two libcu++ headers that most kernels do not use.
* Each worker builds one candidate at a time, on one core, so its TVM thread pool has one thread
  (`TVM_NUM_THREADS=1`, set as it starts). Workers that inherit the tuning process's setting (one
  thread per core) oversubscribe the machine: on the 16-core H100 machine a batch of 64 picks took
  3.6-9.0 s on 16 workers that way, and 1.5-3.2 s with one thread each (`benchmarks/batch_build.py`,
  docs/benchmarks.md).
* Each worker leaves its build's `kernel_key` beside the artifact, for a
  `tvm_env.kernel_reuse.ReusingRunner`; with `compile_cache`, the workers share a folder of compiled
  CUDA kernels (`tvm_env.compile_cache`), so a kernel another schedule generated already is not
  compiled again.

This module runs to about 400 lines: the pool and the functions its workers run (`fast_build`,
`export_so`, `_timed_worker`, `warm_worker`), which TVM's process pool sends to them by reference,
belong together.
"""

from __future__ import annotations

import functools
import json
import shutil
import tempfile
import threading
import weakref
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import tvm
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms

from tvm_env import nvrtc
from tvm_env.compile_cache import hits as compiles_cached
from tvm_env.compile_cache import set_folder as compile_in
from tvm_env.configure import usable_cores
from tvm_env.kernel_reuse import kernel_key, write_key
from tvm_env.popen import end_pool
from tvm_env.target import parse_target, target_spec

__all__ = [
    "ARTIFACTS",
    "SPARE_AHEAD",
    "PooledLocalBuilder",
    "export_so",
    "fast_build",
    "one_build_thread",
    "tiny_kernel",
    "tiny_schedule",
]

ARTIFACTS = ("tar", "so")
"""A build's artifact: MetaSchedule's `.tar` of objects, which the runner links before it loads it,
or a `.so` linked in the build worker (`export_so`)."""

SPARE_AHEAD = 3
"""`PooledLocalBuilder` starts the pool that replaces its workers this many batches before the restart."""

BATCH_KEYS = ("build_cpu_s", "build_work_s", "compiles_cached")
"""What `PooledLocalBuilder.last_batch` holds of its last batch: the CPU seconds its workers spent
building it, their summed wall-clock seconds, and how many of its CUDA compiles came from the pool's
`tvm_env.compile_cache` folder (a kernel built before, from another schedule). With the batch's own
wall time and the workers, the first two tell where a slow batch went: CPU seconds a pick above an
isolated build's point to slower cores (a busy machine, shared physical cores), busy seconds above
CPU seconds to workers waiting for a core, and busy seconds well under wall x workers to workers
waiting for the batch's last builds."""


def _check_nice(nice: int) -> None:
    if not 0 <= nice <= 19:
        raise ValueError(f"nice={nice!r} must be in 0-19")


def one_build_thread(nice: int = 0) -> None:
    """A build worker's initializer: TVM's thread pool in this process gets one thread (read when
    the pool starts, at the first parallel launch, so it must be set before any build); with `nice`
    > 0, the worker runs that many steps of nice lower in CPU priority (where the OS allows)."""
    import os

    os.environ["TVM_NUM_THREADS"] = "1"
    if nice > 0:
        try:
            os.nice(nice)
        except OSError:  # not permitted here: build at the usual priority
            pass


def tiny_kernel() -> Any:
    """A 64-element add with its loop bound to CUDA threads: the smallest kernel a CUDA build takes."""
    return tiny_schedule().mod


def tiny_schedule(bind: bool = True) -> Any:
    """The schedule of `tiny_kernel`, its loop bound to CUDA threads with `bind` (unbound, for a CPU)."""
    from tvm import te

    a = te.placeholder((64,), name="A")
    b = te.compute((64,), lambda i: a[i] + 1.0, name="B")
    sch = tvm.s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([a, b])}))
    if bind:
        (loop,) = sch.get_loops(sch.get_sblock("B"))
        sch.bind(loop, "threadIdx.x")
    return sch


def warm_worker(target_json: str | None) -> bool:
    """A build worker's warm-up: for a CUDA target, build one tiny kernel with `fast_build`, so that the
    worker has loaded NVRTC and the CUDA libraries before its first candidate (on the H100 machine a
    fresh worker's first builds took 3-5 s of wall time each, most of it waiting, against 0.3-1 s
    later). Returns whether it built; a failure only leaves the worker cold."""
    if target_json is None:
        return False
    try:
        target = tvm.target.Target(json.loads(target_json))
        if target.kind.name != "cuda":
            return False
        fast_build(tiny_kernel(), target, None)
        return True
    except Exception:  # noqa: BLE001 - a warm-up that fails costs nothing but the warm-up
        return False


def fast_build(mod: Any, target: Any, _params: Any, max_source_kb: float | None = None) -> Any:
    """MetaSchedule's `default_build` without its per-worker intrinsic import, compiling CUDA with
    `tvm_env.nvrtc` (TVM's NVRTC compile without the headers a kernel does not use), and refusing
    CUDA kernels over `max_source_kb` KB of source (`tvm_env.nvrtc.set_max_source_kb`).

    Must return a runtime `Module` (`tvm.tirx.build`), not `tvm.compile`'s `Executable`: the
    builder's export step calls `export_library` on it.
    """
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    global _last_key
    if tvm.target.Target(target).kind.name == "cuda":
        nvrtc.install()
        nvrtc.set_max_source_kb(max_source_kb)
    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    lib = tvm.tirx.build(mod, target)
    try:
        _last_key = kernel_key(lib)
    except Exception:  # noqa: BLE001 - a module whose code cannot be read back is only not reused
        _last_key = None
    return lib


_last_key: str | None = None
"""The `kernel_key` of this process's last `fast_build`, which `_timed_worker` leaves beside the artifact."""


def export_so(mod: Any) -> str:
    """A build's artifact as a shared library, linked here in the build worker: MetaSchedule's
    `default_export` writes a `.tar` of objects, which a local runner untars and links (`g++`)
    before loading, one candidate after another on each device's runner, while the device waits
    (host, llvm matmul: 21-44 ms a load against 0.2 ms for a `.so`; `benchmarks/artifact_load.py`).
    The same folder layout as `default_export` (`tvm_tmp_mod.*` in a temporary folder of its own),
    which MetaSchedule's artifact clean-up removes. Not for an RPC device, which links with its own
    compiler. Linked by `ld` alone (`tvm_env.link.link_shared`), so the export costs what a `.tar`'s
    does (`benchmarks/artifact_load.py`: 12-19 ms less than the compiler driver's link)."""
    import os
    import shutil
    import tempfile

    from tvm_env.link import link_shared

    folder = tempfile.mkdtemp(prefix="tvm_tmp_mod.")
    path = os.path.join(folder, "tvm_tmp_mod.so")
    try:
        mod.export_library(path, fcompile=link_shared)
    except BaseException:  # a failed link leaves no artifact for the clean-up to find: remove it here
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return path


def _timed_worker(args: tuple, cache_folder: str | None = None) -> tuple[Any, float, float, int]:
    """`local_builder._worker_func(*args)` in a build worker, with the wall and CPU seconds it took and
    whether its compile came from `cache_folder` (`tvm_env.compile_cache`); the built kernel's
    `kernel_key` is left beside the artifact (`tvm_env.kernel_reuse.write_key`)."""
    import time

    from tvm.s_tir.meta_schedule.builder import local_builder

    global _last_key
    compile_in(cache_folder)
    wall, cpu, hits, _last_key = time.perf_counter(), time.process_time(), compiles_cached(), None
    value = local_builder._worker_func(*args)
    if _last_key is not None and isinstance(value, str):
        write_key(value, _last_key)
    return value, time.perf_counter() - wall, time.process_time() - cpu, compiles_cached() - hits


@derived_object
class PooledLocalBuilder(ms.builder.LocalBuilder._cls):
    """`LocalBuilder` with `fast_build` whose worker processes live for `reuse_batches` batches.

    MetaSchedule's LocalBuilder restarts its pool for every batch (a guard against a leak in
    long-lived popen workers), so every batch pays the workers' `import tvm`; here the pool is
    restarted only every `reuse_batches` batches, and its successor starts `SPARE_AHEAD` batches
    before, on a background thread, so the restart only swaps pools. Building and exporting are LocalBuilder's own
    (`local_builder._worker_func`), so results and error messages are the same. `submit` starts a
    batch and returns at once, `finish` waits for its results (`build` is both), so a caller may take
    a batch's first results while its slowest builds go on (`bridge.pipeline.PrefetchBuilder`).

    Attributes:
        last_batch: the last batch's `BATCH_KEYS` (picks that timed out or raised are not counted).
    """

    def __init__(
        self,
        *,
        max_workers: int | None = None,
        timeout_sec: float = 30.0,
        reuse_batches: int = 32,
        max_source_kb: float | None = None,
        artifact: str = "tar",
        nice: int = 0,
        compile_cache: bool = False,
    ):
        """
        Args:
            max_workers: parallel builds (default: the cores this process may use).
            timeout_sec: a build that takes longer fails.
            reuse_batches: batches a pool of worker processes serves before it is restarted.
            max_source_kb: CUDA kernels with more source than this fail at once, before NVRTC
                (`tvm_env.nvrtc.set_max_source_kb`; None: no limit).
            artifact: "tar", MetaSchedule's export (the runner links it); "so", linked in the build
                worker (`export_so`; for a local runner only).
            nice: 0-19, the workers' CPU priority below this process's (0: the same), so that the
                runner's launches and timings do not queue behind compilers on a busy host.
            compile_cache: the workers share a temporary folder of compiled CUDA kernels, keyed by
                source (`tvm_env.compile_cache`), so a kernel built before is not compiled again;
                `shutdown` removes it (`MeasureConfig.reuse_kernels` turns it on with the runner's
                reuse; `set_compile_cache` switches the next batches).
        """
        if reuse_batches < 1:
            raise ValueError(f"reuse_batches={reuse_batches!r} must be >= 1")
        _check_nice(nice)
        nvrtc.check_max_source_kb(max_source_kb)  # here, not first in a worker process
        f_build = fast_build if max_source_kb is None else functools.partial(fast_build, max_source_kb=max_source_kb)
        # LocalBuilder's own default is os.cpu_count(); a process pinned to some cores builds on those
        super().__init__(
            max_workers=max_workers or usable_cores(),
            timeout_sec=timeout_sec,
            f_build=f_build,
        )
        self.reuse_batches, self.max_source_kb, self._pool, self._batches = reuse_batches, max_source_kb, None, 0
        self.nice, self.compile_cache = nice, compile_cache
        self._pool_nice, self._swap_due = nice, False  # the running pool's priority; a `set_nice` swap pending
        self._cache_folder: str | None = None  # made at the first batch, removed by `shutdown`
        self._spare: Future | None = None  # the next pool, started ahead (`SPARE_AHEAD`)
        self._target_json: str | None = None  # the target its workers warm up for (`warm_worker`)
        self.warmed: list[bool] = []  # what `warm_worker` returned in the last pool warmed
        self.restarts = 0
        self.last_batch: dict[str, float] = {}
        self._lock, self._running = threading.Lock(), set()
        self.set_artifact(artifact)

    def set_artifact(self, artifact: str) -> None:
        """Export the next batches' builds as `artifact` ("tar" or "so", as `__init__` takes it): each
        batch hands its export function to the workers, so one pool serves both (a tuning suite's arms
        of either artifact share its workers)."""
        if artifact not in ARTIFACTS:
            raise ValueError(f"artifact={artifact!r} must be one of {ARTIFACTS}")
        with self._lock:  # a batch being submitted keeps the export it started with (`submit`)
            self.f_export = export_so if artifact == "so" else None
            self.artifact = artifact

    def set_compile_cache(self, on: bool, fresh: bool = False) -> None:
        """Take the next batches' compiles from the folder (and keep them there) or not, on the same
        pool (a tuning suite's arms of either setting share its workers); with `fresh`, from a new
        folder, so that a run does not find another run's compiles (a suite's arms are timed apart)."""
        with self._lock:  # a batch being submitted keeps the setting it started with (`submit`)
            self.compile_cache = bool(on)
            folder, self._cache_folder = (self._cache_folder, None) if fresh else (None, self._cache_folder)
        if folder is not None:  # a build still running when it goes only loses its entry
            shutil.rmtree(folder, ignore_errors=True)

    def set_nice(self, nice: int, wait: bool = False) -> None:
        """Run the next batches' builds `nice` steps lower in CPU priority (as `__init__` takes it), so
        that a tuning suite's arms of either setting share one builder. A worker takes its priority when
        it starts (and may not raise it again), so a change replaces the pool: a new one starts now, in
        the background and warmed, and serves the next batch that finds no build in flight; the old one
        ends then. With `wait`, this returns once the new pool has started (a suite's arm does not pay
        the start in its budget). Back to the running pool's priority before that, no pool is replaced."""
        _check_nice(nice)
        spare = None
        with self._lock:
            if nice == self.nice:
                starting = self._spare if self._swap_due else None
            else:
                self.nice = nice
                spare, self._spare = self._spare, None  # started at the old priority
                self._swap_due = self._pool is not None and nice != self._pool_nice
                if self._swap_due or (
                    spare is not None and self._batches >= self.reuse_batches - SPARE_AHEAD
                ):  # the swap's pool, or the restart's that was started ahead (`submit`), at the new priority
                    self._start_spare()
                starting = self._spare if self._swap_due else None
        if spare is not None:
            spare.add_done_callback(lambda f: f.exception() is None and end_pool(f.result()))
        if wait and starting is not None:
            starting.exception()  # started (or failed: the swap raises it)

    def _new_pool(self, warm: bool, nice: int) -> Any:
        from tvm.support.popen_pool import PopenPoolExecutor

        pool = PopenPoolExecutor(
            max_workers=self.max_workers, timeout=self.timeout_sec, initializer=one_build_thread, initargs=(nice,)
        )
        if warm:
            self._warm(pool)
        return pool

    def _warm(self, pool: Any) -> None:
        results = pool.map_with_error_catching(warm_worker, [self._target_json] * self.max_workers)
        self.warmed = [bool(r.value) for r in results]

    def _fresh_pool(self) -> None:
        """Swap in the spare pool (waiting for its start if need be), or a new one; caller holds the lock."""
        old = self._pool
        if self._spare is not None:
            spare, self._spare = self._spare, None
            self._pool = spare.result()
        else:
            self._pool = self._new_pool(warm=False, nice=self.nice)
        self._pool_nice, self._swap_due = self.nice, False  # a spare is always at the builder's nice
        if old is not None:
            self.restarts += 1
            threading.Thread(target=old.shutdown, name="build-pool-shutdown", daemon=True).start()
        self._batches = 0

    def _start_spare(self) -> None:
        """Start the next pool's workers in the background (an error surfaces at the swap); caller
        holds the lock."""
        executor = ThreadPoolExecutor(1, thread_name_prefix="build-pool-spare")
        self._spare = executor.submit(self._new_pool, warm=True, nice=self.nice)
        executor.shutdown(wait=False)  # the thread ends once the pool has started

    def shutdown(self) -> None:
        """End the worker processes now, the spare pool's too (once it has started); idempotent, and a
        later `submit` starts a fresh pool. Without it the pools end when the builder is garbage
        collected: TVM's `PopenPoolExecutor.__del__` then shuts a pool down, joining its threads, at
        whatever point the collector runs, which may be inside another pool's locks; a process that
        makes many builders (a notebook, the tests) should end each."""
        with self._lock:
            pools, self._pool, self._batches = [self._pool], None, 0
            spare, self._spare = self._spare, None
            folder, self._cache_folder = self._cache_folder, None
        if folder is not None:  # a build still running when it goes only loses its entry
            shutil.rmtree(folder, ignore_errors=True)
        if spare is not None:  # still starting: it ends as soon as it has
            spare.add_done_callback(lambda f: f.exception() is None and end_pool(f.result()))
        for pool in filter(None, pools):
            end_pool(pool)

    def warm(self, target: Any = None) -> None:
        """Start every worker now (each imports TVM, seconds), so the first build does not pay it;
        with a CUDA `target` each also builds a tiny kernel (`warm_worker`), and so do the workers of
        every pool that replaces them. A `shutdown` meanwhile only cuts the warm-up short."""
        if target is not None:
            self._target_json = json.dumps(target_spec(parse_target(target)))
        with self._lock:
            if self._pool is None:
                self._fresh_pool()
            pool = self._pool
        try:
            self._warm(pool)
        except RuntimeError:  # the pool was shut down: "cannot schedule new futures after shutdown"
            if pool is self._pool:
                raise

    def submit(self, build_inputs: list) -> list[Future]:
        """Start building `build_inputs` and return at once: one future a build, for `finish`.

        A pool due for its restart (`reuse_batches`) restarts only once no build is in flight.
        """
        from tvm.s_tir.meta_schedule.builder import local_builder

        with self._lock:
            if self._pool is None or ((self._batches >= self.reuse_batches or self._swap_due) and not self._running):
                self._fresh_pool()
            self._batches += 1
            if self._spare is None and self._batches >= self.reuse_batches - SPARE_AHEAD:
                self._start_spare()
            f_export = self.f_export  # one batch, one artifact
            if self.compile_cache and self._cache_folder is None:
                self._cache_folder = tempfile.mkdtemp(prefix="pruner-compiled.")
                weakref.finalize(self, shutil.rmtree, self._cache_folder, ignore_errors=True)  # without `shutdown`
            cache_folder = self._cache_folder if self.compile_cache else None
            futures = [
                # what map_with_error_catching does, a future at a time
                self._pool._threadpool.submit(
                    self._pool._worker_run_with_error_catching,
                    _timed_worker,
                    (
                        (self.f_build, f_export, b.mod, b.target, local_builder._serialize_params(b.params)),
                        cache_folder,
                    ),
                    None,
                )
                for b in build_inputs
            ]
            self._running.update(futures)
        for future in futures:
            future.add_done_callback(self._done)
        return futures

    def _done(self, future: Future) -> None:
        with self._lock:
            self._running.discard(future)

    def finish(self, futures: Sequence[Future]) -> list:
        """The `BuilderResult`s of `submit`'s futures, in order (waiting for those still building);
        sets `last_batch` to what their workers spent."""
        from tvm.support.popen_pool import StatusKind

        results, cpu, work, cached = [], 0.0, 0.0, 0
        for future in futures:
            res = future.result()
            if res.status == StatusKind.COMPLETE:
                path, wall_s, cpu_s, hits = res.value
                results.append(ms.builder.BuilderResult(path, None))
                work, cpu, cached = work + wall_s, cpu + cpu_s, cached + hits
            elif res.status == StatusKind.TIMEOUT:
                results.append(
                    ms.builder.BuilderResult(None, f"LocalBuilder: Timeout, killed after {self.timeout_sec} seconds")
                )
            else:
                results.append(ms.builder.BuilderResult(None, f"LocalBuilder: An exception occurred\n{res.value}"))
        self.last_batch = dict(zip(BATCH_KEYS, (cpu, work, cached)))
        return results

    def build(self, build_inputs: list) -> list:
        return self.finish(self.submit(build_inputs))
