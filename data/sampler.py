"""Random distinct schedules of a task: what the collector measures.

Port of the removed `dataset_sample_candidates.py`: MetaSchedule's evolutionary search with a
`RandomModel` (SampleInitPopulation, then EvolveWithCostModel), so the data covers the design space
rather than the good corner a tuner would visit. Distinct means a distinct structural hash of the
scheduled module.
"""

from __future__ import annotations

from data.features.cache import schedule_key
from data.zoo import TaskSpec
from tvm_env import ms, task_context, tvm, tvm_ffi, usable_cores

__all__ = ["MS_POPULATION", "sample_schedules"]

MS_POPULATION = 512
"""EvolutionarySearch's default population_size (what a tuning run samples its initial population with)."""


def sample_schedules(
    spec: TaskSpec,
    target: tvm.target.Target,
    n: int,
    seed: int,
    exclude: set[int],
    population: int = 64,
    genetic_iters: int = 2,
    min_init: int = 50,
    max_idle_rounds: int = 3,
) -> list[tvm.s_tir.Schedule]:
    """Up to `n` schedules of `spec` from its design space, distinct from each other and `exclude`.

    Port of the removed `dataset_sample_candidates`: evolutionary search with a RandomModel, so the
    picks are random mutations of random initial samples. Fewer than `n` come back when the space
    runs dry (`max_idle_rounds` rounds in a row without a new schedule). A round is one evolution of
    `population` schedules (about 2 s on 2 cores for a CUDA task) plus, when more are wanted, a fresh
    initial population (about 5 s: sampling retries schedules that the postprocessors reject).

    Args:
        exclude: structural hashes of scheduled modules already stored; updated in place.
        min_init: fewest valid schedules in the initial population (duplicates count, as in
            MetaSchedule, whose tuner gives up below its `init_min_unmeasured` = 50 with "Cannot
            sample enough initial population"). A space where most samples fail the postprocessors
            (common on CUDA: VerifyGPUCode) is judged on an initial population of the tuner's
            default size, `MS_POPULATION`, not on the smaller `population`.

    Raises:
        ValueError: the initial population has fewer than `min_init` valid schedules.
        tvm.error.TVMError: the design space cannot be generated or sampled at all.
    """
    sample_init = tvm_ffi.get_global_func("s_tir.meta_schedule.SearchStrategyEvolutionarySearchSampleInitPopulation")
    evolve = tvm_ffi.get_global_func("s_tir.meta_schedule.SearchStrategyEvolutionarySearchEvolveWithCostModel")
    strategy = ms.search_strategy.EvolutionarySearch(
        population_size=population, init_measured_ratio=0.0, genetic_num_iters=genetic_iters
    )
    ctx = task_context(spec.mod, target, strategy, spec.name, threads=usable_cores(), seed=seed % (2**31 - 1))
    ctx.pre_tuning(
        max_trials=1 << 30,
        num_trials_per_iter=n,
        design_spaces=ctx.generate_design_space(),
        database=ms.database.MemoryDatabase(),
        cost_model=ms.cost_model.RandomModel(seed=seed % (2**31 - 1)),
    )
    states, idle = sample_init(strategy, population), 0
    if len(states) < min_init and population < MS_POPULATION:  # judge sparse spaces as tuning would
        states = sample_init(strategy, MS_POPULATION)
    if len(states) < min_init:
        raise ValueError(
            f"Cannot sample enough initial population ({len(states)} valid schedules < {min_init}); "
            "MetaSchedule's evolutionary search would not tune this task"
        )
    picked: list[tvm.s_tir.Schedule] = []
    while len(picked) < n and idle < max_idle_rounds:
        fresh = 0
        for sch in evolve(strategy, states, population):
            h = schedule_key(sch.mod)
            if h not in exclude and len(picked) < n:
                exclude.add(h)
                picked.append(sch)
                fresh += 1
        idle = 0 if fresh else idle + 1
        if len(picked) < n:  # a fresh population only when more are wanted (it costs ~70% of a round)
            states = sample_init(strategy, population)
    return picked
