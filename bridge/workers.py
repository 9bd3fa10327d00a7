"""The processes a tuning run starts, and the check before them: the build pool, the walk pool and the
runner, each of whose workers imports TVM (seconds), so they start in the background, early.

`bridge.tuning.tune_tasks` starts what it is not given and ends what it started; `tune.py` and
`benchmarks/tuning.py` start them before they extract their tasks or before their first run
(`start_workers`) and pass them in.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

from bridge.config import CostModelConfig, MeasureConfig, SearchConfig
from tvm_env import PooledLocalBuilder, StartedRunner, init_device, ms, parse_target, tvm, usable_cores
from tvm_env.arguments import alloc_local, alloc_rpc
from tvm_env.graph_timer import run_graph_evaluator

__all__ = ["check_device", "make_runner", "start_workers", "walks_tir"]


def check_device(target: Any, measure: MeasureConfig) -> None:
    """Fail fast when a local runner cannot run the target here (a CUDA target on a machine without a
    GPU would otherwise run every trial to failure and report nothing).

    Raises:
        ValueError: the target's device is missing on this machine (names the target).
    """
    if measure.runner != "local":
        return
    kind = target.kind.name
    if kind in ("cuda", "rocm", "vulkan", "opencl", "metal") and not tvm.device(kind, 0).exist:
        raise ValueError(
            f"--target {kind}: no {kind} device on this machine (tvm.device({kind!r}, 0).exist is False); "
            "measure on a machine that has one, or through --runner rpc"
        )


def make_runner(measure: MeasureConfig, target: Any) -> Any:
    """The runner `measure` describes: a local one whose worker starts in the background
    (`tvm_env.StartedRunner`; end it with `.shutdown()`), or one through an RPC tracker."""
    evaluator = ms.runner.EvaluatorConfig(
        number=measure.number, repeat=measure.repeat, min_repeat_ms=measure.min_repeat_ms, enable_cpu_cache_flush=False
    )
    if measure.runner == "local":  # its worker starts (imports TVM, opens the device) while the first search runs
        init = functools.partial(init_device, target.kind.name)
        timer = run_graph_evaluator if measure.timer == "graph" else None  # None: the evaluator
        return StartedRunner(
            make=lambda: ms.runner.LocalRunner(
                evaluator_config=evaluator,
                timeout_sec=measure.timeout,
                initializer=init,
                f_alloc_argument=alloc_local,  # integer tensors (indices) set to ones: in range
                f_run_evaluator=timer,
            )
        )
    host, port = measure.tracker.rsplit(":", 1)
    config = ms.runner.RPCConfig(
        tracker_host=host, tracker_port=int(port), tracker_key=measure.key, session_timeout_sec=int(measure.timeout)
    )
    return ms.runner.RPCRunner(rpc_config=config, evaluator_config=evaluator, f_alloc_argument=alloc_rpc)


def walks_tir(search: SearchConfig, cost_model: CostModelConfig) -> bool:
    """Whether a run walks the TIR in Python (PSA drafts, or PAM verifies), so wants a walk pool."""
    return search.psa is not None or cost_model.name.startswith("pam")


def start_workers(
    target: Any, measure: MeasureConfig, *, walk: bool, build: bool = True, wait: bool = False
) -> tuple[Any, Any]:
    """The build pool (a `PooledLocalBuilder`, None without `build`) and the walk pool (a
    `data.features.WalkPool`, started only with `walk`) of a tuning run, their processes starting
    now in the background (with `wait`, started when this returns): each imports TVM, seconds, so a
    caller that starts them before it extracts its tasks (`tune.py`) or before its first run
    (`benchmarks/tuning.py`) keeps that out of the run. Pass them to `tune_tasks(builder=...,
    walk_pool=...)`."""
    from data.features import WalkPool, default_walk_workers

    target = parse_target(target)
    builder, warming = None, []
    if build:
        cores = int(target.export().get("num-cores", usable_cores()))
        builder = PooledLocalBuilder(
            max_workers=measure.workers or cores,
            timeout_sec=measure.timeout,
            max_source_kb=measure.max_source_kb,
            artifact=measure.artifact,
            nice=measure.build_nice,
            compile_cache=measure.reuse_kernels,
        )
        warming.append(threading.Thread(target=builder.warm, args=(target,), name="build-pool-warm", daemon=True))
        warming[-1].start()
    walk_pool = WalkPool(default_walk_workers())
    if walk and (thread := walk_pool.warm()) is not None:
        warming.append(thread)
    for thread in warming if wait else ():
        thread.join()
    return builder, walk_pool
