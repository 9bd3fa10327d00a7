"""TVM worker processes that start without importing torch.

apache-tvm-ffi 0.1.14 imports torch whenever it is imported (`tvm_ffi/__init__.py`: a work-around for a
symbol clash seen on Windows), and TVM's `PopenWorker` starts every build, run and featurizing worker
as `python -m tvm.exec.popen_worker`, which imports tvm and so torch. Measured on the 2-core CI
machine: a fresh process imports tvm in 5.6 s with torch and in 1.7 s without it. A tuning run starts
a build worker a core and a runner worker; the test suite starts hundreds of workers.

`install()` (called when `tvm_env` is imported) makes TVM start its workers through `WORKER_CODE`:
it imports tvm with torch hidden, shows torch again, and runs TVM's own worker loop
(`tvm.exec.popen_worker.main`). A function sent to such a worker may still import torch (it then pays
the import itself, as `bridge.network_timing`'s children do); what is off in the worker is tvm_ffi's
optional torch fast paths (torch dtypes and tensors passed straight to TVM functions, the C DLPack
exchange), which no worker of this project uses.

On GPU machines too. TVM's CUDA runtime (`libtvm_runtime_cuda.so`) needs `libcudart`, which a
pip-installed torch loads when it is imported, and TVM swallows the error when that library is missing.
So a worker that finds a CUDA driver (`libcuda.so.1`, or the library `PRUNER_CUDA_DRIVER_LIB` names)
but not TVM's CUDA runtime after its lean import imports torch and loads that runtime again, as TVM
does (`tvm.backend.cuda.register_backend`): it then has CUDA as a worker started the old way has, at
the old start-up cost. Checked on two H200s with the GPU kit (`benchmarks/gpu/lean_check.py`;
docs/benchmarks.md, "MoA beside Pruner on every workload"): the CUDA toolkit's own `libcudart` loads
without torch, a lean worker copies to the GPU and compiles with NVRTC, and answers in 1.8-2.3 s
against 4.8-7.0 s; a tuning run's workers are ready in 11.2-12.4 s against 23.3-26.9 s.

The hook is the `subprocess` name in `tvm.support.popen_pool`: `PopenWorker._start` builds its
command inline, so no argument or subclass reaches it. `PRUNER_TORCH_IN_WORKERS=1` in the environment
leaves TVM's command as it is.
"""

from __future__ import annotations

import os
import subprocess

__all__ = ["WORKER_CODE", "install"]

WORKER_CODE = """\
import sys


class _HideTorch:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r} (hidden while tvm imports)", name=name)
        return None


sys.meta_path.insert(0, _HideTorch)
try:
    import tvm
finally:
    sys.meta_path.remove(_HideTorch)


def _cuda_runtime_after_torch():
    # TVM's CUDA runtime, loaded again after torch has loaded the CUDA libraries it brings, when a
    # CUDA driver is here and the lean import left that runtime out (no libcudart without torch)
    import ctypes
    import os

    from tvm.base import _LOADED_LIBS

    if "tvm_runtime_cuda" in _LOADED_LIBS:
        return
    try:
        ctypes.CDLL(os.environ.get("PRUNER_CUDA_DRIVER_LIB") or "libcuda.so.1")
    except OSError:
        return  # no driver: no CUDA to lose
    import torch  # noqa: F401 (its import loads libcudart and the other CUDA libraries)
    from pathlib import Path

    from tvm_ffi.libinfo import load_lib_ctypes

    try:
        _LOADED_LIBS["tvm_runtime_cuda"] = load_lib_ctypes(
            package="tvm",
            target_name="tvm_runtime_cuda",
            extra_lib_paths=[Path(_LOADED_LIBS["tvm_runtime"]._name).resolve().parent],
            mode="RTLD_LOCAL",
        )
    except (OSError, FileNotFoundError, RuntimeError):
        pass  # as TVM: a build without CUDA, or a driver without the libraries


_cuda_runtime_after_torch()
del _cuda_runtime_after_torch
from tvm.exec.popen_worker import main

try:
    main()
except (OSError, KeyboardInterrupt):
    pass
"""

_TVM_WORKER = ["-m", "tvm.exec.popen_worker"]


class _Subprocess:
    """`subprocess` as `tvm.support.popen_pool` sees it: its `Popen` starts TVM's worker through
    `WORKER_CODE` (the same arguments after it: the worker's two pipe descriptors); every other name is
    the real module's."""

    def __getattr__(self, name: str):
        return getattr(subprocess, name)

    @staticmethod
    def Popen(cmd, *args, **kwargs):  # noqa: N802 (subprocess's name)
        if list(cmd[1:3]) == _TVM_WORKER:
            cmd = [cmd[0], "-c", WORKER_CODE, *cmd[3:]]
        return subprocess.Popen(cmd, *args, **kwargs)


def install() -> bool:
    """Start TVM's worker processes without torch from now on, in this process (True), unless
    `PRUNER_TORCH_IN_WORKERS=1` (False). Installing twice is the same as once."""
    from tvm.support import popen_pool

    if os.environ.get("PRUNER_TORCH_IN_WORKERS") == "1":
        return False
    if not isinstance(popen_pool.subprocess, _Subprocess):
        popen_pool.subprocess = _Subprocess()
    return True
