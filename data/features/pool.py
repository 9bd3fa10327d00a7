"""`WalkPool`: the Python TIR walk of large candidate batches, spread over worker processes.

The walk (access records, GEMM matrix, PSA rows) is pure Python, 10-70 ms a candidate, and would
make a 1536-schedule draft generation take a minute on one core. `featurize_candidates(...,
pool=WalkPool(n))` serializes the scheduled modules (`tvm.ir.save_json`, on threads: the FFI
releases the GIL) and hands chunks to `n` long-lived processes (TVM's PopenPoolExecutor; each imports
TVM once), which run the same `walk_modules` as the in-process path. Batches smaller than
`min_batch`, or `workers <= 1`, are walked in this process; a chunk whose worker fails is walked here
too, so results never depend on the pool.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from data.features.program import ProgramFeatures
from data.features.walk import walk_modules
from tvm_env import tvm, usable_cores
from tvm_env.popen import end_pool

__all__ = ["WalkPool", "default_walk_workers"]


def default_walk_workers() -> int:
    """Walk processes by default: one per core, none below 4 cores (measured on a 2-core VM: the
    serialization and the workers' contention with the main process made a pool of 2 slower than
    walking in-process, 56 vs 36 ms a candidate)."""
    cores = usable_cores()
    return cores if cores >= 4 else 0


def _walk_texts(texts: list[str], is_gpu: bool) -> list:
    """Worker side: `walk_modules` of serialized scheduled modules (errors as RuntimeError text,
    which pickles whatever TVM raised)."""
    walked = walk_modules([tvm.ir.load_json(text) for text in texts], is_gpu)
    return [RuntimeError(f"{type(w).__name__}: {w}") if isinstance(w, Exception) else w for w in walked]


class WalkPool:
    """Worker processes for the walk of `data.features.featurize_candidates` (module docstring)."""

    def __init__(self, workers: int, *, chunk: int = 16, min_batch: int = 64):
        """
        Args:
            workers: walk processes (0 or 1: never use processes).
            chunk: the most modules a task sent to a worker (`chunk_size`).
            min_batch: smaller batches are walked in this process.
        """
        if workers < 0 or chunk < 1:
            raise ValueError(f"workers={workers!r} must be >= 0 and chunk={chunk!r} >= 1")
        self.workers, self.chunk, self.min_batch = workers, chunk, min_batch
        self.serialized = 0  # modules serialized for the workers so far
        self._pool = None
        self._lock = threading.Lock()  # one batch at a time: a drafting thread and the main one share it
        self._count_lock = threading.Lock()

    def warm(self) -> threading.Thread | None:
        """Start the worker processes now, on a background thread (each imports TVM, seconds), so the
        first draft of a tuning run does not wait for them. Returns the thread (None: no processes)."""
        if self.workers <= 1:
            return None

        def start() -> None:
            with self._lock:
                list(self._executor().map_with_error_catching(lambda _: _walk_texts([], False), range(self.workers)))

        thread = threading.Thread(target=start, name="walk-pool-warm", daemon=True)
        thread.start()
        return thread

    def _executor(self):
        from tvm.support.popen_pool import PopenPoolExecutor

        if self._pool is None:
            self._pool = PopenPoolExecutor(max_workers=self.workers)
        return self._pool

    def close(self) -> None:
        """End the worker processes now (idempotent; a later walk starts them again), rather than when
        the pool is garbage collected (`tvm_env.PooledLocalBuilder.shutdown` says why)."""
        with self._lock:
            pool, self._pool = self._pool, None
        end_pool(pool)

    def takes(self, batch: int) -> bool:
        """Whether a batch of this size goes to the processes."""
        return self.workers > 1 and batch >= self.min_batch

    def walk(self, mods: Sequence[tvm.IRModule], is_gpu: bool, threads: int) -> list[ProgramFeatures | Exception]:
        """`walk_modules(mods, is_gpu)` on the worker processes (serialized on `threads` threads).

        The workers take one batch at a time; a batch is serialized before it waits for them, so
        that another thread's batch (a draft beside the rounds, or a task's first draft beside
        another's) walks meanwhile. Serializing is about 2 ms a module against a walk's 28 ms on one
        core (a 3x3 convolution's CUDA schedules on the 2-core host), so with 16 workers it may be a
        third of a batch's time or more, the workers idle if it ran under the lock (estimated from
        those figures; not measured on a 16-core machine)."""
        mods = list(mods)
        with ThreadPoolExecutor(max(1, threads)) as threads_pool:
            texts = list(threads_pool.map(tvm.ir.save_json, mods))
        with self._count_lock:
            self.serialized += len(texts)
        with self._lock:
            return self._walk(mods, texts, is_gpu, threads)

    def _walk(self, mods: list, texts: list[str], is_gpu: bool, threads: int) -> list[ProgramFeatures | Exception]:
        from tvm.support.popen_pool import StatusKind

        processes = self._executor()
        size = self.chunk_size(len(texts))
        chunks = [(texts[s : s + size], is_gpu) for s in range(0, len(texts), size)]
        out: list[ProgramFeatures | Exception] = []
        for c, result in enumerate(processes.map_with_error_catching(lambda args: _walk_texts(*args), chunks)):
            if result.status == StatusKind.COMPLETE:
                out.extend(result.value)
            else:
                out.extend(walk_modules(mods[c * size : (c + 1) * size], is_gpu, threads))
        return out

    def chunk_size(self, batch: int) -> int:
        """Modules a task of a batch of `batch`: about two tasks a worker, at most `chunk`. With chunks of
        `chunk` alone, a batch of 70 on 16 workers went to 5 of them, and one of 330 took two rounds of
        16-module chunks where one of 11 would do (a draft's calls are of such sizes: its fresh samples,
        then each generation's new schedules)."""
        return max(1, min(self.chunk, -(-batch // (2 * max(1, self.workers)))))
