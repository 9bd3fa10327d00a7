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

Only on machines without a CUDA driver (`libcuda.so.1` does not load). TVM's CUDA runtime
(`libtvm_runtime_cuda.so`) needs `libcudart`, which a pip-installed torch loads when it is imported,
and TVM swallows the error when that library is missing: hiding torch could leave a GPU machine's
workers without CUDA, silently. There the workers start as TVM starts them until that is checked on a
GPU. The CPU machines that tune for llvm, and the tests, get the lean workers.

The hook is the `subprocess` name in `tvm.support.popen_pool`: `PopenWorker._start` builds its
command inline, so no argument or subclass reaches it. `PRUNER_TORCH_IN_WORKERS=1` in the environment
leaves TVM's command as it is; `PRUNER_TORCH_IN_WORKERS=0` installs the lean workers on a machine with
a CUDA driver too (to check them there: a worker's `tvm.cuda(0).exist` must stay True).
"""

from __future__ import annotations

import ctypes
import os
import subprocess

__all__ = ["WORKER_CODE", "cuda_driver", "install"]

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


def cuda_driver() -> bool:
    """Whether this machine has a CUDA driver (`libcuda.so.1` loads)."""
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


def install() -> bool:
    """Start TVM's worker processes without torch from now on, in this process (True), unless
    `PRUNER_TORCH_IN_WORKERS=1`, or the machine has a CUDA driver and `PRUNER_TORCH_IN_WORKERS` is
    not 0 (False). Installing twice is the same as once."""
    from tvm.support import popen_pool

    choice = os.environ.get("PRUNER_TORCH_IN_WORKERS")
    if choice == "1" or (choice != "0" and cuda_driver()):
        return False
    if not isinstance(popen_pool.subprocess, _Subprocess):
        popen_pool.subprocess = _Subprocess()
    return True
