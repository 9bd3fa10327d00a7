"""Per-process set-up: worker threads, the tensor intrinsics a target needs, quiet logging.

* `TVM_NUM_THREADS` defaults to half the cores on x86 (one thread on a 2-core box); it must be set
  before the runner's worker starts, so `setup()` sets it from the target's core count.
* `usable_cores()` is the number of cores this process may run on (its CPU affinity): a suite that
  runs one tuning process per GPU pins each to its share of the cores, and every pool sized from
  `os.cpu_count()` would then oversubscribe them.
* `import tvm.s_tir.tensor_intrin` costs about 20 s (mostly CUDA intrinsics) per process;
  `setup()` registers only the ones the target's rules need. Of the CUDA intrinsics' 10-12 s (the
  2-core dev VM; more on a loaded one), most went to `inspect.stack()` (36.7 of 42.5 s under
  cProfile), which TVMScript's `prim_func` calls for each of the 360 functions it parses: for every
  frame it looks up the frame's module by scanning `sys.modules` (thousands of entries once torch is
  imported) to read one line of source. `setup()` registers them with a `inspect.stack` that reads
  that line with `linecache` directly (`_quick_stack`): 1.7 s instead of 10-12 s on that VM, the
  same 81 intrinsics (their JSON is identical). `PRUNER_QUICK_STACK=0` registers them with the
  standard `inspect.stack`.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import linecache
import logging
import os
import sys
import types
from collections.abc import Iterator
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


def quick_stack(context: int = 1) -> list[inspect.FrameInfo]:
    """`inspect.stack(context)` of the caller, each frame's lines read with `linecache` alone.

    The same frames, file names, line numbers, function names and source lines as `inspect.stack`;
    what it skips is `inspect.getmodule`'s scan of `sys.modules` for every frame (the source lines
    come from the frame's file name, as `linecache` finds them; positions are not filled in).
    """
    frame, out = sys._getframe(1), []
    while frame is not None:
        code, lineno = frame.f_code, frame.f_lineno
        lines, index = None, None
        source = linecache.getlines(code.co_filename, frame.f_globals) if context > 0 else []
        if source and lineno is not None:  # the window inspect.getframeinfo takes
            start = max(0, min(lineno - 1 - context // 2, len(source) - context))
            lines, index = source[start : start + context], lineno - 1 - start
        out.append(inspect.FrameInfo(frame, code.co_filename, lineno, code.co_name, lines, index))
        frame = frame.f_back
    return out


@contextlib.contextmanager
def _quick_stack() -> Iterator[None]:
    """`inspect.stack` is `quick_stack` meanwhile (for TVMScript's parser: see the module docstring)."""
    slow, inspect.stack = inspect.stack, quick_stack
    try:
        yield
    finally:
        inspect.stack = slow


def _register_intrinsics(*submodules: str) -> None:
    """Import only the named `tvm.s_tir.tensor_intrin` submodules (about 1 s instead of 20 s)."""
    pkg = sys.modules.get(_INTRIN)
    if pkg is None:
        pkg = types.ModuleType(_INTRIN)
        pkg.__path__ = [os.path.join(os.path.dirname(tvm.s_tir.__file__), "tensor_intrin")]
        pkg._pruner_stub = True
        sys.modules[_INTRIN] = pkg
    quick = os.environ.get("PRUNER_QUICK_STACK", "1") != "0"
    for sub in submodules:
        with _quick_stack() if quick else contextlib.nullcontext():
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
