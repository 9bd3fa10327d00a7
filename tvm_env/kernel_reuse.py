"""Measure each distinct kernel once: a candidate whose generated code was measured already takes that
measurement instead of the device's time.

MetaSchedule never measures a schedule twice, but it tells schedules apart by their structure, and
two structures can compile to one kernel (a split of loops that end up unrolled either way). In the
suite's H200 runs, 9-36% of Pruner's trials measured a kernel it had measured before
(`benchmarks/kernel_repeats.py`, docs/benchmarks.md). Each build worker of a `PooledLocalBuilder`
hashes what it built (`kernel_key`: the device code and the host code, about 0.5 ms) and leaves the
hash beside the artifact (`KEY_FILE`); `ReusingRunner` reads it, measures the first candidate of each
key, and gives every later candidate of that key the first one's measurement (a candidate that comes
while it is under way waits for it, and fails if it failed). What the runner never saw is counted
(`reused_total`, and per batch for a `bridge.search_log.SearchLog`). A measurement that failed is not
kept: a later twin is measured again. The artifacts of reused candidates are removed by
MetaSchedule's `RemoveBuildArtifact` callback, as every artifact is.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from typing import Any

from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms

__all__ = ["KEY_FILE", "ReusingRunner", "kernel_key", "read_key", "write_key"]

KEY_FILE = "kernel.key"
"""The file beside a build's artifact (in the artifact's own folder) that holds its `kernel_key`."""


def kernel_key(lib: Any) -> str:
    """A built module's generated code, hashed: its device modules' source and its host code (LLVM
    IR, whose type-based alias metadata names objects by their addresses in this process, which are
    left out)."""
    parts = [m.inspect_source() for m in lib.imports]
    parts.append(re.sub(r'"0x[0-9a-f]+', '"0x', lib.inspect_source()))  # also "0x...w4.b12" and the like
    return hashlib.sha1("\0".join(parts).encode()).hexdigest()


def write_key(artifact_path: str, key: str) -> None:
    """Leave `key` beside the artifact at `artifact_path` (in a build worker, after the export)."""
    with open(os.path.join(os.path.dirname(artifact_path), KEY_FILE), "w") as f:
        f.write(key)


def read_key(artifact_path: str | None) -> str | None:
    """The `kernel_key` left beside the artifact, or None (no artifact, or a builder that leaves none)."""
    if not artifact_path:
        return None
    try:
        with open(os.path.join(os.path.dirname(str(artifact_path)), KEY_FILE)) as f:
            key = f.read().strip()
    except OSError:
        return None
    return key if re.fullmatch(r"[0-9a-f]{40}", key) else None


@derived_object
class _Measured(ms.runner.PyRunnerFuture):
    """A measurement taken before: done at once."""

    def __init__(self, *, run_secs: list[float]):
        super().__init__()
        self.run_secs = run_secs

    def done(self) -> bool:
        return True

    def result(self):
        return ms.runner.RunnerResult(run_secs=list(self.run_secs), error_msg=None)


@derived_object
class _Kept(ms.runner.PyRunnerFuture):
    """A measurement the inner runner takes. Its result, once there, settles its key in the runner
    (kept when it succeeded); its twins (`_Twin`) read the same result."""

    def __init__(self, *, future: Any, key: str | None, runner: ReusingRunner):
        super().__init__()
        self.future, self.key, self.runner = future, key, runner
        self._result, self._lock = None, threading.Lock()
        self.token = object()  # who it is: `derived_object` hands out a wrapper, not this instance

    def done(self) -> bool:
        return self._result is not None or self.future.done()

    def result(self):
        with self._lock:
            if self._result is None:
                self._result = self.future.result()
                self.runner.settle(self)
            return self._result


@derived_object
class _Twin(ms.runner.PyRunnerFuture):
    """A candidate whose kernel an earlier candidate is being measured for: that one's result."""

    def __init__(self, *, first: _Kept):
        super().__init__()
        self.first = first

    def done(self) -> bool:
        return self.first.done()

    def result(self):
        first = self.first.result()
        if first.error_msg is not None or first.run_secs is None:
            return ms.runner.RunnerResult(
                run_secs=None,
                error_msg=f"the same kernel as another candidate being measured, whose run failed:\n{first.error_msg}",
            )
        return ms.runner.RunnerResult(run_secs=[float(s) for s in first.run_secs], error_msg=None)


@derived_object
class ReusingRunner(ms.runner.PyRunner):
    """`runner`, asked only for kernels not measured yet in this runner's life (see the module's doc).
    A candidate whose kernel is being measured (in its batch, or in an earlier one not yet done) waits
    for that measurement.

    Attributes:
        measured: kernel key -> the run seconds of its measurement.
        reused_total: candidates that the inner runner never saw, so far.
        count_reused: whether to keep the artifact paths of those candidates for `take_reused` (a
            `bridge.search_log.SearchLog` turns it on, and takes them batch by batch).
    """

    def __init__(self, *, runner: Any):
        super().__init__()
        self.runner = runner
        self.measured: dict[str, list[float]] = {}
        self.reused_total, self.count_reused = 0, False
        self._reused: set[str] = set()
        self._pending: dict[str, _Kept] = {}  # key -> the measurement of it still under way
        self._lock = threading.Lock()

    def settle(self, kept: _Kept) -> None:
        """`kept`'s result is there: keep its run seconds under its key if it succeeded."""
        result = kept._result
        with self._lock:
            pending = self._pending.get(kept.key) if kept.key is not None else None
            if pending is not None and pending.token is kept.token:
                del self._pending[kept.key]
            if kept.key is not None and result.error_msg is None and result.run_secs is not None:
                self.measured.setdefault(kept.key, [float(s) for s in result.run_secs])

    def take_reused(self, artifact_paths: list[str]) -> int:
        """How many of `artifact_paths` the inner runner never saw (and forget them); needs `count_reused`."""
        with self._lock:
            found = self._reused.intersection(artifact_paths)
            self._reused -= found
        return len(found)

    def run(self, runner_inputs):
        futures: list[Any] = [None] * len(runner_inputs)
        fresh, firsts = [], {}
        for i, runner_input in enumerate(runner_inputs):
            key = read_key(runner_input.artifact_path)
            with self._lock:
                run_secs = self.measured.get(key) if key is not None else None
                pending = self._pending.get(key) if key is not None else None
            if run_secs is not None:
                futures[i] = _Measured(run_secs=run_secs)
            elif pending is not None:
                futures[i] = _Twin(first=pending)
            elif key is not None and key in firsts:
                futures[i] = firsts[key]  # a placeholder: the first's index, made a _Twin below
            else:
                fresh.append((i, key))
                if key is not None:
                    firsts[key] = i
                continue
            with self._lock:
                self.reused_total += 1
                if self.count_reused:
                    self._reused.add(str(runner_input.artifact_path))
        inner = self.runner.run([runner_inputs[i] for i, _ in fresh]) if fresh else []
        for (i, key), future in zip(fresh, inner):
            futures[i] = _Kept(future=future, key=key, runner=self)
            if key is not None:
                with self._lock:
                    self._pending[key] = futures[i]
        return [_Twin(first=futures[f]) if isinstance(f, int) else f for f in futures]

    def shutdown(self) -> None:
        """The inner runner's `shutdown`, where it has one."""
        if hasattr(self.runner, "shutdown"):
            self.runner.shutdown()
