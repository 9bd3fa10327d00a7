"""tvm_env.graph_timer: a runner that times CUDA candidates as CUDA graphs (`--timer graph`). The CUDA
path needs a GPU (it ran on an H200 through `benchmarks/launch_floor.py`, docs/benchmarks.md); here a
real runner made with the graph timer measures a real llvm build through the evaluator it falls back
to on any other device, and the settings are checked."""

import os

import pytest
from tvm import te
from tvm.s_tir.meta_schedule.testing import te_workload

from bridge.config import MeasureConfig
from bridge.workers import make_runner
from tvm_env import ms, parse_target, tvm
from tvm_env.graph_timer import GRAPH_LAUNCHES, MAX_REPLAYS, launches_for, replays_for, run_graph_evaluator


def test_a_graph_timed_runner_measures_a_cpu_build_with_the_evaluator(make_builder):
    target = parse_target({"kind": "llvm", "num-cores": 1})
    mod = tvm.IRModule({"main": te.create_prim_func(te_workload.matmul(32, 32, 32))})
    (built,) = make_builder(max_workers=1).build([ms.builder.BuilderInput(mod, target)])
    assert built.error_msg is None and os.path.isfile(str(built.artifact_path))
    runner = make_runner(MeasureConfig(timer="graph", min_repeat_ms=1, repeat=2), target)
    try:
        args = ms.arg_info.ArgInfo.from_prim_func(mod["main"])
        (future,) = runner.run([ms.runner.RunnerInput(str(built.artifact_path), "cpu", args)])
        result = future.result()
        assert runner._runner.result().f_run_evaluator is run_graph_evaluator  # what the worker times with
    finally:
        runner.shutdown()
    default = make_runner(MeasureConfig(), target)
    try:
        assert default._runner.result().f_run_evaluator is None  # the evaluator, MetaSchedule's default
    finally:
        default.shutdown()
    assert result.error_msg is None, result.error_msg
    assert len(result.run_secs) == 2 and all(float(t) > 0 for t in result.run_secs)  # `repeat` readings


def test_a_graph_holds_about_a_millisecond_of_launches_within_bounds():
    assert launches_for(3e-6, GRAPH_LAUNCHES) == GRAPH_LAUNCHES  # a 3 us kernel: the most, 100
    assert launches_for(1e-4, GRAPH_LAUNCHES) == 10
    assert launches_for(0.01, GRAPH_LAUNCHES) == 1  # a slow kernel: one launch, timed like the evaluator
    assert launches_for(0.0, GRAPH_LAUNCHES) == GRAPH_LAUNCHES


def test_readings_last_min_repeat_ms_within_bounds():
    assert replays_for(1e-3, 100) == 100  # 1 ms a replay: 100 replays make 100 ms
    assert replays_for(3e-4, 100) == 334
    assert replays_for(0.5, 100) == 1  # a replay longer than a reading: one
    assert replays_for(1e-9, 100) == MAX_REPLAYS and replays_for(0.0, 100) == MAX_REPLAYS
    assert replays_for(1e-3, 0) == 1


def test_the_graph_timer_is_for_a_local_runner_only():
    with pytest.raises(ValueError, match="--timer graph needs --runner local"):
        MeasureConfig(timer="graph", runner="rpc", tracker="127.0.0.1:9190", key="k")
    with pytest.raises(ValueError, match="--timer 'events'"):
        MeasureConfig(timer="events")
