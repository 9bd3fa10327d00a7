"""Fixtures of the feature tests: targets and MetaSchedule candidates sampled from a design space.

The CUDA target needs the CUDA tensor intrinsics (tvm_env.setup, ~20 s once): only the tests that
ask for `cuda_target` pay for it.
"""

import pytest

import tvm_env
from tvm_env import ms, tvm, tvm_ffi

CPU = {"kind": "llvm", "mcpu": "native", "num-cores": 2}


@pytest.fixture(scope="session")
def cpu_target():
    target = tvm_env.parse_target(CPU)
    tvm_env.setup(target)
    return target


@pytest.fixture(scope="session")
def cuda_target():
    target = tvm_env.parse_target("nvidia/nvidia-h100")
    tvm_env.setup(target)
    return target


def candidate(sch):
    return ms.MeasureCandidate(sch, ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True))


def _sample(mod, target, n, seed=0, threads=1):
    """(context, n MetaSchedule candidates of `mod`): design space + random decisions, post-processed."""
    strategy = ms.search_strategy.EvolutionarySearch(init_measured_ratio=0.0, population_size=n)
    ctx = ms.TuneContext(
        mod=mod,
        target=target,
        space_generator="post-order-apply",
        search_strategy=strategy,
        task_name="t",
        num_threads=threads,
        rand_state=seed,
    )
    ctx.pre_tuning(
        max_trials=n,
        num_trials_per_iter=n,
        design_spaces=ctx.generate_design_space(),
        database=ms.database.MemoryDatabase(),
        cost_model=ms.cost_model.RandomModel(),
    )
    sample_init = tvm_ffi.get_global_func("s_tir.meta_schedule.SearchStrategyEvolutionarySearchSampleInitPopulation")
    return ctx, [candidate(s) for s in list(sample_init(strategy, n))[:n]]


@pytest.fixture(scope="session")
def sample():
    """`sample(mod, target, n, seed=0, threads=1) -> (context, candidates)`."""
    return _sample


@pytest.fixture(scope="session")
def te_module():
    """`te_module(tensors) -> IRModule` of a TE compute."""
    from tvm import te

    return lambda tensors: tvm.IRModule({"main": te.create_prim_func(tensors)})
