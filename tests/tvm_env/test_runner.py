"""tvm_env.StartedRunner: MetaSchedule's LocalRunner, started on a background thread (its worker opening
the device first, `init_device`), measures for real."""

import os
import time

import pytest
from tvm import te
from tvm.s_tir.meta_schedule.testing import te_workload

from tvm_env import StartedRunner, init_device, ms, parse_target, tvm


def test_a_started_runner_returns_at_once_and_measures_a_real_kernel(make_builder):
    import functools

    target = parse_target({"kind": "llvm", "num-cores": 1})
    mod = tvm.IRModule({"main": te.create_prim_func(te_workload.matmul(32, 32, 32))})
    (built,) = make_builder(max_workers=1).build([ms.builder.BuilderInput(mod, target)])  # ends with the test
    assert built.error_msg is None and os.path.isfile(str(built.artifact_path))
    made = []

    def make():
        runner = ms.runner.LocalRunner(
            evaluator_config=ms.runner.EvaluatorConfig(number=2, repeat=1, min_repeat_ms=1),
            initializer=functools.partial(init_device, "llvm"),  # the target kind, as bridge.tuning passes it
        )
        made.append(time.perf_counter())
        return runner

    start = time.perf_counter()
    runner = StartedRunner(make=make)
    returned = time.perf_counter()
    args = ms.arg_info.ArgInfo.from_prim_func(mod["main"])
    (future,) = runner.run([ms.runner.RunnerInput(str(built.artifact_path), "cpu", args)])
    result = future.result()
    runner.shutdown()  # its worker process ends now, not with the garbage collector
    assert result.error_msg is None and len(result.run_secs) == 1 and float(result.run_secs[0]) > 0
    # the constructor did not wait for LocalRunner's (its worker imports TVM: a second or more)
    assert made and returned - start < 0.5 * (made[0] - start), (returned - start, made[0] - start)


def test_a_runner_that_fails_to_start_raises_at_its_first_run():
    def make():
        raise RuntimeError("no device")

    runner = StartedRunner(make=make)
    with pytest.raises(RuntimeError, match="no device"):
        runner.run([])
