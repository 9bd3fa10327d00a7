"""Time a CUDA kernel as a CUDA graph: the kernel's own time, not the host's launch rate.

TVM's time evaluator (MetaSchedule's `LocalRunner`) times `number` launches made one after another by
the host, between two CUDA events. A kernel that runs for less time than the host takes to launch
the next one (the packed call, then `cuLaunchKernel`) leaves the GPU waiting in between, and the
reading is the host's launch rate. On an H200 machine a kernel of 64 adds read 3.8 us that way with
the host idle and 9.1 us with its cores busy, as a tuning run keeps them; the suite's best depthwise
conv and batch_matmul kernels, 2.4-3.7 us of GPU time, were reported at 3.3-4.6 us, so a run could
not tell them apart (docs/benchmarks.md, "The host's launch floor").

`run_graph_evaluator` is a `LocalRunner` `f_run_evaluator` (it runs in the runner's worker process):
it captures launches of the candidate into a CUDA graph on a stream of its own (TVM launches on the
stream `tvm_ffi.use_raw_stream` sets): about 1 ms of them by the least of up to `SIZING_CALLS` timed
calls, at most `GRAPH_LAUNCHES`. It replays the graph until one reading lasts `min_repeat_ms`, and
returns each of `repeat` readings per launch, in seconds, as the evaluator does. The GPU launches a
graph's kernels itself, so a reading is the kernel's time and the graph's gap between kernels
(0.7-1.0 us for the 64-add kernel on the H200), idle host or busy. Other devices are timed by the
evaluator, as before. It talks to the CUDA driver (`libcuda`) through
ctypes: no torch in the runner's worker.
"""

from __future__ import annotations

import ctypes
import math
from typing import Any

__all__ = ["GRAPH_LAUNCHES", "run_graph_evaluator"]

GRAPH_LAUNCHES = 100
"""Launches of the candidate captured in one graph at most (a replay of a 3 us kernel's graph takes 0.3 ms)."""

SIZING_CALLS = 3
"""Calls timed, at most, to size a graph: the least of them (a call's time includes the host's launch,
which a busy host can stretch; a kernel of 1 ms or more needs one)."""

REPLAY_S = 1e-3
"""A graph holds as many launches as make about this many seconds of kernel time, up to `GRAPH_LAUNCHES`
(one launch for a kernel of 1 ms or more: a slow candidate costs no more to time than the evaluator)."""

MAX_REPLAYS = 100_000
"""At most this many replays a reading, whatever `min_repeat_ms` asks."""

_CAPTURE_THREAD_LOCAL = 1  # CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
_STREAM_NON_BLOCKING = 1  # CU_STREAM_NON_BLOCKING
_driver: Any = None


def _cuda() -> Any:
    """libcuda, loaded once per process."""
    global _driver
    if _driver is None:
        _driver = ctypes.CDLL("libcuda.so.1")
    return _driver


def _check(result: int, call: str) -> None:
    if result != 0:
        name = ctypes.c_char_p()
        _cuda().cuGetErrorName(result, ctypes.byref(name))
        raise RuntimeError(f"{call} failed: CUDA error {result} ({(name.value or b'?').decode()})")


class _Graph:
    """Calls of `f(*args)` captured on a stream of their own, as many as `launches_for` gives for one
    call's time (at most `max_launches`), instantiated; `time` replays it and reads the seconds a
    launch. Freed by `close`, also when the capture fails."""

    def __init__(self, f, args, device, max_launches: int) -> None:
        self.launches = max_launches
        self.stream, self.graph, self.exec = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
        self.events = [ctypes.c_void_p(), ctypes.c_void_p()]
        try:
            self._capture(f, args, device)
        except BaseException:  # what was made before the failure is freed with it
            self.close()
            raise

    def _capture(self, f, args, device) -> None:
        import tvm_ffi

        cu = _cuda()
        _check(cu.cuStreamCreate(ctypes.byref(self.stream), _STREAM_NON_BLOCKING), "cuStreamCreate")
        for event in self.events:
            _check(cu.cuEventCreate(ctypes.byref(event), 0), "cuEventCreate")
        with tvm_ffi.use_raw_stream(device, self.stream.value):
            f(*args)  # loads the kernel into the context (not allowed while capturing) and warms it
            _check(cu.cuStreamSynchronize(self.stream), "cuStreamSynchronize")
            seconds = self._timed_call(f, args)
            for _ in range(SIZING_CALLS - 1):  # a call's time includes the host's launch: take the least
                if seconds >= REPLAY_S or launches_for(seconds, self.launches) == self.launches:
                    break
                seconds = min(seconds, self._timed_call(f, args))
            self.launches = launches_for(seconds, self.launches)
            _check(cu.cuStreamBeginCapture_v2(self.stream, _CAPTURE_THREAD_LOCAL), "cuStreamBeginCapture")
            try:
                for _ in range(self.launches):
                    f(*args)
            finally:  # a failed launch still ends the capture, or the stream stays unusable
                ended = cu.cuStreamEndCapture(self.stream, ctypes.byref(self.graph))
            _check(ended, "cuStreamEndCapture")
        _check(
            cu.cuGraphInstantiateWithFlags(ctypes.byref(self.exec), self.graph, ctypes.c_ulonglong(0)),
            "cuGraphInstantiate",
        )

    def _timed_call(self, f, args) -> float:
        """Seconds from an event before one call of `f(*args)` to one after it, on the stream."""
        cu = _cuda()
        _check(cu.cuEventRecord(self.events[0], self.stream), "cuEventRecord")
        f(*args)
        _check(cu.cuEventRecord(self.events[1], self.stream), "cuEventRecord")
        return self._elapsed_s()

    def time(self, replays: int) -> float:
        """Seconds a launch, over `replays` replays of the graph."""
        cu = _cuda()
        start, end = self.events
        _check(cu.cuEventRecord(start, self.stream), "cuEventRecord")
        for _ in range(replays):
            _check(cu.cuGraphLaunch(self.exec, self.stream), "cuGraphLaunch")
        _check(cu.cuEventRecord(end, self.stream), "cuEventRecord")
        return self._elapsed_s() / (replays * self.launches)

    def _elapsed_s(self) -> float:
        """Seconds between the two events, once the second has passed."""
        cu = _cuda()
        _check(cu.cuEventSynchronize(self.events[1]), "cuEventSynchronize")
        ms = ctypes.c_float()
        _check(cu.cuEventElapsedTime(ctypes.byref(ms), *self.events), "cuEventElapsedTime")
        return ms.value / 1e3

    def close(self) -> None:
        if not any(h.value for h in (self.exec, self.graph, self.stream, *self.events)):
            return  # nothing was made (libcuda may not even load)
        cu = _cuda()
        if self.exec.value:
            cu.cuGraphExecDestroy(self.exec)
        if self.graph.value:
            cu.cuGraphDestroy(self.graph)
        for event in self.events:
            if event.value:
                cu.cuEventDestroy_v2(event)
        if self.stream.value:
            cu.cuStreamDestroy_v2(self.stream)
        for handle in (self.exec, self.graph, self.stream, *self.events):
            handle.value = None  # a second close destroys nothing


def launches_for(seconds_a_call: float, max_launches: int) -> int:
    """Launches a graph holds: about `REPLAY_S` of calls of `seconds_a_call` each, 1 to `max_launches`."""
    if seconds_a_call <= 0:
        return max_launches
    return max(1, min(max_launches, math.ceil(REPLAY_S / seconds_a_call)))


def replays_for(seconds_a_replay: float, min_repeat_ms: float) -> int:
    """Replays that make one reading last `min_repeat_ms` (at least 1, at most `MAX_REPLAYS`)."""
    if seconds_a_replay <= 0:
        return MAX_REPLAYS
    return max(1, min(MAX_REPLAYS, math.ceil(min_repeat_ms / 1e3 / seconds_a_replay)))


def run_graph_evaluator(rt_mod, device, evaluator_config, repeated_args) -> list[float]:
    """A `LocalRunner` `f_run_evaluator`: for a CUDA device, `evaluator_config.repeat` readings of each
    argument set in `repeated_args`, each the seconds a launch over graph replays lasting
    `min_repeat_ms` at least (`number` is the evaluator's, not used here); other devices go to the
    evaluator (`run_evaluator_common`)."""
    from tvm.s_tir.meta_schedule.runner.utils import run_evaluator_common

    if device.dlpack_device_type() != 2:  # kDLCUDA
        return run_evaluator_common(rt_mod, device, evaluator_config, repeated_args)
    f = rt_mod[rt_mod.entry_name]
    costs = []
    for args in repeated_args:
        device.sync()
        graph = _Graph(f, args, device, GRAPH_LAUNCHES)
        try:
            graph.time(1)  # the first replay also uploads the graph to the device
            first = graph.time(1)  # a replay's time, to size the readings
            replays = replays_for(first * graph.launches, evaluator_config.min_repeat_ms or 0)
            costs += [graph.time(replays) for _ in range(evaluator_config.repeat)]
        finally:
            graph.close()
    return costs
