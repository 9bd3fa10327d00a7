"""One draft of Pruner's search (`bridge.draft_verify`): sample, then evolve with the draft model, in
the search's thread (`Draft.run`) or on a thread of its own alongside the rounds (`Draft.start`).

A draft touches only its own inner `EvolutionarySearch` (MetaSchedule's `SampleInitPopulation` and
`EvolveWithCostModel`, which read neither the database nor the strategy's measured set) and the
draft model (PSA: no state that measurements change; it featurizes through the run's thread-safe
`data.features.FeatureCache`). What it needs of the database (the best measured schedules) and of
the measured set (the last population, less what was measured) is read before it starts, by the
caller, so a draft that runs alongside the tuning loop shares no state with MetaSchedule's
callbacks. With the same inputs and the drafter's own random state its result is the same either
way.

A draft alongside may run at a lower CPU priority (`nice`): it runs on a thread whose nice value is
raised on Linux, and the threads TVM's C++ sampling and evolution start from it inherit the value, so
where the host's cores are short the builds and the next batch's search, which the device waits on,
go first, and the draft takes what they leave. Its PSA walk runs in the walk pool's processes, at
their own priority, and a first verify after it (`then`) at the usual one. Measured on the GPU: no
gain, so it is off (`SearchConfig.draft_nice`).

Why alongside: a stall re-draft took 8-11 s on the H100 machine (sampling 1.5-2.5 s, PSA 2-3 s, the
rest MetaSchedule's evolution), and the round that waited for it left the GPU idle about that long;
drafts were 4-17% of an arm's time (docs/benchmarks.md). Run alongside, the round that asks for it
verifies the current potential space, and the draft is taken up by the next round's search.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from bridge.search import _distinct, _pairs, candidate
from tvm_env import ms, tvm_ffi

__all__ = [
    "ENUMERATED_DRAWS",
    "Draft",
    "DraftResult",
    "drew_whole_space",
    "enumerated",
    "lower_priority",
    "sample_init",
    "with_threads",
]

logger = logging.getLogger(__name__)

_SAMPLE_INIT = tvm_ffi.get_global_func("s_tir.meta_schedule.SearchStrategyEvolutionarySearchSampleInitPopulation")
_EVOLVE = tvm_ffi.get_global_func("s_tir.meta_schedule.SearchStrategyEvolutionarySearchEvolveWithCostModel")
_TUNE_CONTEXT = tvm_ffi.get_global_func("s_tir.meta_schedule.TuneContext")
_INITIALIZE = tvm_ffi.get_global_func("s_tir.meta_schedule.TuneContextInitialize")
_QUIET = logging.getLogger(f"{__name__}.first_draft")  # warnings only: MetaSchedule's C++ prints INFO to stderr
_QUIET.setLevel(logging.WARNING)

ENUMERATED_DRAWS = 16
"""A draft whose fresh samples drew each distinct schedule this many times or more, on average, and none
only once, has drawn its task's whole space (`enumerated`)."""


def enumerated(samples: int, distinct: int, singletons: int = 0) -> bool:
    """Whether `samples` random schedules of which `distinct` differ, `singletons` of them drawn once,
    have drawn the whole design space: each drawn `ENUMERATED_DRAWS` times or more on average, and none
    only once (the share of the space never drawn is about singletons / samples: Good-Turing).
    MetaSchedule's mutators change a decision within the support its sampling draws from, so evolving
    such a space finds nothing that sampling did not: an injective task's space is a handful of thread
    extents (BERT-base on CUDA: 11 of its 18 tasks, 1-6 distinct schedules in 512 samples; a space of S
    equally likely schedules misses one in 16 S draws with odds about S e^-16)."""
    return 0 < distinct and samples >= ENUMERATED_DRAWS * distinct and singletons == 0


def drew_whole_space(keys: Sequence[int]) -> bool:
    """`enumerated` of random samples given by their schedule keys (repeats included)."""
    times = Counter(keys)
    return enumerated(len(keys), len(times), sum(1 for t in times.values() if t == 1))


def sample_init(sampler: Any, num: int) -> list:
    """`num` fresh random schedules' worth of valid ones from `sampler`: a
    `bridge.sampling.ConstrainedSampler`, or an inner `EvolutionarySearch` (MetaSchedule's
    `SampleInitPopulation`, until its `init_min_unmeasured` are valid)."""
    if hasattr(sampler, "sample"):
        return sampler.sample(num)
    return list(_SAMPLE_INIT(sampler, num))


def with_threads(context: Any, threads: int, log: logging.Logger | None = None) -> Any:
    """A copy of the task's TuneContext whose sampling, evolution and featurization run on `threads`
    threads (MetaSchedule's `EvolutionarySearch` takes its thread count from the context it is
    initialized with; PerStoreFeature and PSA's features from the context they are handed): the same
    module, target, name and random state, a clone of the design-space generator (its postprocessors
    and mutators), and `log` (the task's own: TuneContext's cannot be read back; None: one that
    passes on warnings only)."""
    copy = ms.TuneContext.__new__(ms.TuneContext)
    copy.__init_handle_by_constructor__(
        _TUNE_CONTEXT,
        context.mod,
        context.target,
        context.space_generator.clone(),
        None,
        context.task_name,
        threads,
        context.rand_state,
        ms.logging.get_logging_func(log if log is not None else _QUIET),
    )
    _INITIALIZE(copy)
    return copy


def lower_priority(nice: int) -> int | None:
    """Raise the calling thread's nice value by `nice` (capped at 19), on Linux, where the value is a
    thread's own and the threads it starts inherit it; the new value, or None where it is not
    changed (`nice` 0, another OS, or refused)."""
    if nice <= 0 or sys.platform != "linux":
        return None
    tid = threading.get_native_id()
    try:
        value = min(19, os.getpriority(os.PRIO_PROCESS, tid) + nice)
        os.setpriority(os.PRIO_PROCESS, tid, value)
    except OSError as err:
        logger.warning("could not lower a draft's CPU priority (nice %+d): %s", nice, err)
        return None
    return value


@dataclasses.dataclass
class DraftResult:
    """What a draft leaves: its fresh samples and the evolved population (best draft score first),
    each as (schedule key, schedule) pairs, hashed in the draft's thread; whether the population is
    unevolved (a quick start); whether the samples drew the task's whole space (`enumerated`: the
    population is the distinct samples in the draft model's order, unevolved, and no later draft
    finds more); and the draft's statistics (`sample_s`, `samples`, `samples_asked`;
    `draft_s`, `psa_s` and `draft_scored` of the draft alone; `draft_span`, its start and end by
    `time.perf_counter`)."""

    samples: list[tuple[int, Any]]
    evolved: list[tuple[int, Any]]
    unevolved: bool
    stats: dict
    ranking: Any = None
    """What the draft's `then` made of it on the draft's thread (a task's first verify), or None."""
    enumerated: bool = False


class Draft:
    """A draft of `population_size` schedules: `parents` (best measured) + `fresh` new samples +
    `reused` (the last draft's evolved population), evolved by `drafter` (an inner EvolutionarySearch
    set up with `draft_model`); the fresh ones come from `sampler` (another such search, whose
    `init_min_unmeasured` may differ, or a `bridge.sampling.ConstrainedSampler`: `sample_init`;
    default: `drafter`); with `quick_start` the fresh samples are
    only ranked, not evolved. A started draft with `then` calls it on its result, on its thread,
    once the slot is given back, and keeps what it returns as the result's `ranking`. A started draft
    with `nice` > 0 runs at that much lower CPU priority (`lower_priority`); its `then` does not.
    A draft that reuses no population (a task's first) whose fresh samples drew the whole space
    (`enumerated`) ranks them instead of evolving them."""

    def __init__(
        self,
        *,
        drafter: Any,
        sampler: Any = None,
        draft_model: Any,
        context: Any,
        parents: list,
        reused: list,
        fresh: int,
        population_size: int,
        quick_start: bool = False,
        then: Callable[[DraftResult], Any] | None = None,
        nice: int = 0,
    ):
        self.drafter, self.draft_model, self.context = drafter, draft_model, context
        self.then, self.nice = then, nice
        self.sampler = sampler if sampler is not None else drafter
        self.parents, self.reused, self.fresh = parents, reused, fresh
        self.population_size, self.quick_start = population_size, quick_start
        self._future: Future | None = None

    def run(self) -> DraftResult:
        """Sample and evolve now, in this thread."""
        start = time.perf_counter()
        scored, psa = self.draft_model.scored, self.draft_model.seconds
        samples = sample_init(self.sampler, self.fresh) if self.fresh > 0 else []
        stats = {"sample_s": time.perf_counter() - start, "samples": len(samples), "samples_asked": self.fresh}
        population = (self.parents + samples + self.reused)[: self.population_size]
        drawn = _pairs(samples)
        fresh = _distinct(drawn)
        # the fresh samples alone decide: parents are measured schedules of the same space (a resumed
        # task's first draft has them), and a reused population was evolved already
        whole = not self.reused and drew_whole_space([k for k, _ in drawn])
        unevolved = self.quick_start and not self.parents and not whole
        if unevolved or whole:  # rank the fresh samples (a quick start's are evolved by the next draft)
            distinct = fresh if whole else _distinct(_pairs(population))
            scores = self.draft_model.predict(self.context, [candidate(s) for _, s in distinct])
            pairs = [distinct[i] for i in np.argsort(-np.asarray(scores), kind="stable")]
        else:
            pairs = _pairs(_EVOLVE(self.drafter, population, self.population_size)) if population else []
        end = time.perf_counter()
        stats.update(
            draft_s=end - start,
            draft_span=(start, end),  # by time.perf_counter: the log places the draft on the run's clock
            psa_s=self.draft_model.seconds - psa,
            draft_scored=self.draft_model.scored - scored,
        )
        return DraftResult(fresh, pairs, unevolved, stats, enumerated=whole)

    def _run_at_priority(self) -> DraftResult:
        """`run`, with `nice` > 0 on a thread of its own whose priority is lowered (a thread cannot
        raise its priority back without privileges, and what runs after the draft on this thread, a
        first verify, holds locks the tuning loop waits on)."""
        if self.nice <= 0:
            return self.run()

        def niced() -> DraftResult:
            lower_priority(self.nice)  # the thread is the draft's own: it ends with it
            return self.run()

        with ThreadPoolExecutor(1, thread_name_prefix="pruner-draft-niced") as executor:
            return executor.submit(niced).result()

    def start(self, slots: threading.Semaphore | None = None) -> None:
        """Run on a thread of its own; `result` waits for it (and re-raises what it raised). With
        `slots`, the draft waits for one first and holds it while it runs (a bound on the drafts that
        run at once; its `draft_s` leaves the wait out)."""

        def job() -> DraftResult:
            if slots is None:
                result = self._run_at_priority()
            else:
                with slots:
                    result = self._run_at_priority()
            if self.then is not None:  # at the usual priority: a first verify holds the cost model's lock
                result.ranking = self.then(result)
            return result

        executor = ThreadPoolExecutor(1, thread_name_prefix="pruner-draft")
        self._future = executor.submit(job)
        executor.shutdown(wait=False)  # the thread ends with the draft

    def done(self) -> bool:
        """Whether a started draft has ended (its `result` then returns at once)."""
        return self._future is not None and self._future.done()

    def result(self) -> tuple[DraftResult, float]:
        """The result of a started draft, and the seconds this call waited for it."""
        if self._future is None:
            raise RuntimeError("Draft.result() before Draft.start()")
        start = time.perf_counter()
        result = self._future.result()
        return result, time.perf_counter() - start
