"""tvm_env.lean_workers: TVM's worker processes import tvm without torch, and may still import it."""

import os
import subprocess
import sys

import torch
from tvm import te
from tvm.s_tir.meta_schedule.testing import te_workload
from tvm.support import popen_pool

from tvm_env import lean_workers, ms, parse_target, tvm


def _in_a_worker(function, *args):
    worker = popen_pool.PopenWorker()
    try:
        worker.send(function, args, timeout=120)
        return worker.recv()
    finally:
        worker.kill()


def test_a_tvm_worker_imports_tvm_without_torch_and_can_import_torch_later(make_builder):
    assert isinstance(popen_pool.subprocess, lean_workers._Subprocess)  # installed by `import tvm_env`
    # lambdas travel by value (a module function would make the worker import its module, torch and all)
    state = _in_a_worker(lambda: (sys.orig_argv[1], "tvm" in sys.modules, "torch" in sys.modules))
    assert state == ("-c", True, False)
    # what the worker runs may import torch after all, and meets the one this process imported
    assert _in_a_worker(lambda: __import__("torch").__version__) == torch.__version__
    # MetaSchedule's build pool starts such workers, and a real build succeeds in one
    target = parse_target({"kind": "llvm", "num-cores": 1})
    mod = tvm.IRModule({"main": te.create_prim_func(te_workload.matmul(32, 32, 32))})
    (built,) = make_builder(max_workers=1).build([ms.builder.BuilderInput(mod, target)])
    assert built.error_msg is None and os.path.isfile(str(built.artifact_path))


def test_the_opt_out_keeps_tvms_own_command(monkeypatch):
    monkeypatch.setattr(popen_pool, "subprocess", subprocess)  # as TVM has it; restored after the test
    monkeypatch.setenv("PRUNER_TORCH_IN_WORKERS", "1")
    assert lean_workers.install() is False and popen_pool.subprocess is subprocess
    monkeypatch.delenv("PRUNER_TORCH_IN_WORKERS")
    assert lean_workers.install() is True and isinstance(popen_pool.subprocess, lean_workers._Subprocess)
    installed = popen_pool.subprocess
    assert lean_workers.install() is True and popen_pool.subprocess is installed  # twice is once
    assert popen_pool.subprocess.TimeoutExpired is subprocess.TimeoutExpired  # the rest is subprocess's


def test_a_worker_with_a_cuda_driver_but_no_cuda_runtime_imports_torch_and_loads_it_again(monkeypatch):
    # This machine has no CUDA runtime for TVM; a driver that loads stands for a GPU machine whose
    # libcudart only torch's import brings. The worker then imports torch and retries TVM's CUDA runtime
    # (here it fails again, as TVM's own import did), and still serves.
    monkeypatch.setenv("PRUNER_CUDA_DRIVER_LIB", "libc.so.6")
    state = _in_a_worker(lambda: ("torch" in sys.modules, __import__("tvm").cpu(0).exist))
    assert state == (True, True)
    monkeypatch.setenv("PRUNER_CUDA_DRIVER_LIB", "libno-such-driver.so")  # no driver: no torch
    assert _in_a_worker(lambda: "torch" in sys.modules) is False


def test_a_command_other_than_tvms_worker_is_left_as_it_is():
    run = lean_workers._Subprocess.Popen(
        [sys.executable, "-c", "import sys; print(sys.argv[1:])", "a"], stdout=subprocess.PIPE, text=True
    )
    assert run.communicate(timeout=60)[0].strip() == "['a']"
