"""Per-process set-up: worker threads, the tensor intrinsics a target needs, quiet logging.

* `TVM_NUM_THREADS` defaults to half the cores on x86 (one thread on a 2-core box); it must be set
  before the runner's worker starts, so `setup()` sets it from the target's core count.
* `usable_cores()` is the number of cores this process may run on (its CPU affinity): a suite that
  runs one tuning process per GPU pins each to its share of the cores, and every pool sized from
  `os.cpu_count()` would then oversubscribe them.
* `import tvm.s_tir.tensor_intrin` costs about 20 s (mostly CUDA intrinsics) per process;
  `setup()` registers only the ones the target's rules need.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import types
from typing import Any

import tvm
from tvm.s_tir import meta_schedule as ms

__all__ = ["setup", "task_context", "task_loggers", "usable_cores"]

_INTRIN = "tvm.s_tir.tensor_intrin"


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity where the OS reports one, else all."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _register_intrinsics(*submodules: str) -> None:
    """Import only the named `tvm.s_tir.tensor_intrin` submodules (about 1 s instead of 20 s)."""
    pkg = sys.modules.get(_INTRIN)
    if pkg is None:
        pkg = types.ModuleType(_INTRIN)
        pkg.__path__ = [os.path.join(os.path.dirname(tvm.s_tir.__file__), "tensor_intrin")]
        pkg._pruner_stub = True
        sys.modules[_INTRIN] = pkg
    for sub in submodules:
        importlib.import_module(f"{_INTRIN}.{sub}")


def setup(target: tvm.target.Target | None = None, quiet: bool = True) -> None:
    """Prepare this process for tuning or featurizing on `target` (idempotent).

    Sets `TVM_NUM_THREADS` to the target's `num-cores` unless the user set it, registers the tensor
    intrinsics the target's schedule rules need, and lowers MetaSchedule's console logging.
    """
    if target is not None and target.kind.name == "llvm":
        cores = target.export().get("num-cores")
        if cores:
            os.environ.setdefault("TVM_NUM_THREADS", str(cores))
    _register_intrinsics("x86")
    if target is not None and target.kind.name == "cuda":
        _register_intrinsics("cuda")
    if quiet:
        logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)


def task_loggers(work_dir: str, task_names: list[str]) -> list[logging.Logger]:
    """MetaSchedule's per-task loggers writing to `work_dir`/logs (`get_loggers_from_work_dir`).

    That function re-lists the handlers of the "tvm.s_tir.meta_schedule" logger by name and fails on
    a handler without one (pytest's log capture adds such handlers); those are set aside meanwhile.
    """
    root = logging.getLogger("tvm.s_tir.meta_schedule")
    unnamed = [h for h in root.handlers if h.get_name() is None]
    for handler in unnamed:
        root.removeHandler(handler)
    try:
        return ms.logging.get_loggers_from_work_dir(work_dir, task_names)
    finally:
        for handler in unnamed:
            root.addHandler(handler)


def task_context(
    mod: Any,
    target: Any,
    strategy: Any,
    name: str,
    *,
    threads: int | str = "physical",
    seed: int = 0,
    logger: logging.Logger | None = None,
) -> Any:
    """MetaSchedule's `TuneContext` of one task as this project tunes: design spaces from
    "post-order-apply", `strategy` searching them, `threads` for its sampling and evolution (with
    more than one, which thread samples which schedule varies from run to run), `seed` its random
    state. The context initializes `strategy` itself; `clone()` it for a tuning run."""
    return ms.TuneContext(
        mod=mod,
        target=target,
        space_generator="post-order-apply",
        search_strategy=strategy,
        task_name=name,
        logger=logger,
        rand_state=seed,
        num_threads=threads,
    )
