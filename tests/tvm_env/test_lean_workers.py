"""tvm_env.lean_workers: TVM's worker processes import tvm without torch, and may still import it."""

import os
import subprocess
import sys

import pytest
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


@pytest.mark.skipif(lean_workers.cuda_driver(), reason="lean workers are for machines without a CUDA driver")
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


def test_the_opt_out_and_a_cuda_driver_keep_tvms_own_command(monkeypatch):
    monkeypatch.setattr(popen_pool, "subprocess", subprocess)  # as TVM has it; restored after the test
    monkeypatch.setenv("PRUNER_TORCH_IN_WORKERS", "1")
    assert lean_workers.install() is False and popen_pool.subprocess is subprocess
    monkeypatch.delenv("PRUNER_TORCH_IN_WORKERS")
    monkeypatch.setattr(lean_workers, "cuda_driver", lambda: True)
    assert lean_workers.install() is False and popen_pool.subprocess is subprocess
    monkeypatch.setenv("PRUNER_TORCH_IN_WORKERS", "0")  # asked for on a machine with a CUDA driver
    assert lean_workers.install() is True and isinstance(popen_pool.subprocess, lean_workers._Subprocess)
    monkeypatch.setattr(popen_pool, "subprocess", subprocess)
    monkeypatch.delenv("PRUNER_TORCH_IN_WORKERS")
    monkeypatch.setattr(lean_workers, "cuda_driver", lambda: False)
    assert lean_workers.install() is True and isinstance(popen_pool.subprocess, lean_workers._Subprocess)
    installed = popen_pool.subprocess
    assert lean_workers.install() is True and popen_pool.subprocess is installed  # twice is once
    assert popen_pool.subprocess.TimeoutExpired is subprocess.TimeoutExpired  # the rest is subprocess's


def test_a_command_other_than_tvms_worker_is_left_as_it_is():
    run = lean_workers._Subprocess.Popen(
        [sys.executable, "-c", "import sys; print(sys.argv[1:])", "a"], stdout=subprocess.PIPE, text=True
    )
    assert run.communicate(timeout=60)[0].strip() == "['a']"
