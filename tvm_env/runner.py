"""A runner that starts in the background, so that a tuning run's first search does not wait for it.

MetaSchedule's `LocalRunner` starts its worker process in its constructor and waits until the worker
has imported TVM (seconds; about 2 s on the 2-core host, more on a GPU machine whose cores are busy
starting the build and featurization workers at the same time). A tuning run that builds its runner
before its first search pays that wait on the clock while the device is idle. `StartedRunner`
builds the runner on a background thread; `run` waits for it, by when the first draft (several
seconds) has usually covered the start. `init_device` is the worker's initializer that also creates
the device's context (a CUDA context takes a fraction of a second more), so that the first batch's
run time is the kernels'.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms

from tvm_env.popen import end_pool

__all__ = ["StartedRunner", "init_device"]


def init_device(kind: str) -> None:
    """A runner worker's initializer: open device 0 of `kind` (a device or target kind name: "cuda",
    "llvm") and allocate on it (creates its context)."""
    import tvm

    device = tvm.runtime.device("cpu" if kind in ("llvm", "c") else kind, 0)
    if device.exist:
        tvm.runtime.empty((1,), "float32", device)


@derived_object
class StartedRunner(ms.runner.PyRunner):
    """The runner that `make()` returns, made on a background thread; `run` waits for it (and raises
    what `make` raised)."""

    def __init__(self, *, make: Callable[[], Any]):
        super().__init__()
        pool = ThreadPoolExecutor(1, thread_name_prefix="runner-start")
        self._runner = pool.submit(make)
        pool.shutdown(wait=False)  # the thread ends once `make` returns

    def run(self, runner_inputs):
        return self._runner.result().run(runner_inputs)

    def shutdown(self) -> None:
        """End the runner's worker process (its `pool`, a LocalRunner's) now, or once `make` has
        returned; a runner without a pool (RPC) has nothing to end."""
        self._runner.add_done_callback(lambda f: f.exception() is None and end_pool(getattr(f.result(), "pool", None)))
