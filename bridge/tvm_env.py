"""The one place where the project imports and configures apache-tvm 0.27 MetaSchedule.

Everything that talks to TVM (collector, featurizer, cost model, search, tune.py) goes through
here, so `pruner_models/` and shard reading import without TVM, and the three set-up pitfalls of
apache-tvm 0.27 are handled once:

* `TVM_NUM_THREADS` defaults to half the cores on x86 (one thread on a 2-core box); it must be set
  before the runner's worker starts, so `setup()` sets it from the target's core count.
* `import tvm.s_tir.tensor_intrin` costs about 20 s (mostly CUDA intrinsics) per process;
  `setup()` registers only the ones the target's rules need.
* The default `LocalBuilder` re-does that import in each fresh worker; `fast_build` is a
  module-level builder function that does not (workers import it by reference).
* `LocalBuilder` also starts a fresh process pool for every batch, and each worker pays the whole
  `import tvm` (2-14 s, torch included) before building one batch of kernels that take ~0.1 s each;
  `PooledLocalBuilder` keeps its workers for `reuse_batches` batches.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import sys
import types
from typing import Any

import tvm
import tvm_ffi  # re-exported for callers that need structural_hash/equal
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms

__all__ = [
    "PooledLocalBuilder",
    "fast_build",
    "is_gpu",
    "ms",
    "parse_target",
    "setup",
    "target_device_name",
    "task_loggers",
    "tvm",
    "tvm_ffi",
]

_INTRIN = "tvm.s_tir.tensor_intrin"


def parse_target(target: str | dict | tvm.target.Target) -> tvm.target.Target:
    """A `Target` from a tag ("nvidia/nvidia-h100"), a JSON string or a dict.

    CPU targets get `num-cores` (MetaSchedule refuses to tune without it) from the machine when the
    user left it out, and `"mcpu": "native"` becomes LLVM's name for the host CPU.

    Raises:
        ValueError: for the old CLI form ("llvm -mcpu=...") that apache-tvm 0.27 no longer parses.
    """
    if isinstance(target, tvm.target.Target):
        return target
    if isinstance(target, str):
        text = target.strip()
        if text.startswith("{"):
            target = json.loads(text)
        elif " -" in text:
            raise ValueError(
                f"target {target!r}: the CLI form is not accepted by apache-tvm 0.27; pass a tag "
                "('nvidia/nvidia-h100') or a JSON dict ('{\"kind\": \"llvm\", \"num-cores\": 2}')"
            )
        elif text == "llvm":
            target = {"kind": "llvm"}
    if isinstance(target, dict) and target.get("kind") == "llvm":
        if target.get("mcpu") == "native":  # LLVM's name for this machine's CPU
            target = {**target, "mcpu": str(tvm.target.codegen.llvm_get_system_cpu())}
        if "num-cores" not in target:
            target = {**target, "num-cores": os.cpu_count() or 1}
    return tvm.target.Target(target)


def is_gpu(target: tvm.target.Target) -> bool:
    return "gpu" in [str(k) for k in target.keys]


def target_device_name(target: tvm.target.Target) -> str:
    """A short, file-name-safe device name: 'cuda-sm_90a', 'llvm-sapphirerapids-2c'."""
    attrs = target.export()
    if attrs["kind"] == "llvm":
        return f"llvm-{attrs.get('mcpu', 'generic')}-{attrs.get('num-cores', 1)}c"
    return f"{attrs['kind']}-{attrs.get('arch', 'generic')}"


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


def fast_build(mod: Any, target: Any, _params: Any) -> Any:
    """MetaSchedule's `default_build` without its per-worker intrinsic import.

    Must return a runtime `Module` (`tvm.tirx.build`), not `tvm.compile`'s `Executable`: the
    builder's export step calls `export_library` on it.
    """
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    return tvm.tirx.build(mod, target)


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


@derived_object
class PooledLocalBuilder(ms.builder.LocalBuilder._cls):
    """`LocalBuilder` with `fast_build` whose worker processes live for `reuse_batches` batches.

    MetaSchedule's LocalBuilder restarts its pool for every batch (a guard against a leak in
    long-lived popen workers), so every batch pays the workers' `import tvm`; here the pool is
    restarted only every `reuse_batches` batches. Building and exporting are LocalBuilder's own
    (`local_builder._worker_func`), so results and error messages are the same.
    """

    def __init__(self, *, max_workers: int | None = None, timeout_sec: float = 30.0, reuse_batches: int = 32):
        if reuse_batches < 1:
            raise ValueError(f"reuse_batches={reuse_batches!r} must be >= 1")
        super().__init__(max_workers=max_workers, timeout_sec=timeout_sec, f_build=fast_build)
        self.reuse_batches, self._pool, self._batches = reuse_batches, None, 0

    def build(self, build_inputs: list) -> list:
        from tvm.s_tir.meta_schedule.builder import local_builder
        from tvm.support.popen_pool import PopenPoolExecutor, StatusKind

        if self._pool is None or self._batches >= self.reuse_batches:
            if self._pool is not None:
                self._pool.shutdown()
            self._pool = PopenPoolExecutor(max_workers=self.max_workers, timeout=self.timeout_sec)
            self._batches = 0
        self._batches += 1
        args = [(self.f_build, self.f_export, b.mod, b.target, local_builder._serialize_params(b.params)) for b in build_inputs]
        results = []
        for res in self._pool.map_with_error_catching(lambda x: local_builder._worker_func(*x), args):
            if res.status == StatusKind.COMPLETE:
                results.append(ms.builder.BuilderResult(res.value, None))
            elif res.status == StatusKind.TIMEOUT:
                results.append(ms.builder.BuilderResult(None, f"LocalBuilder: Timeout, killed after {self.timeout_sec} seconds"))
            else:
                results.append(ms.builder.BuilderResult(None, f"LocalBuilder: An exception occurred\n{res.value}"))
        return results
