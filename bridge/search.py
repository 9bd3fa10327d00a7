"""Search strategies for MetaSchedule tuning runs, and their per-round log (shared/spec/search.md).

`DraftVerifySearch` is Pruner's draft-then-verify exploration mapped onto MetaSchedule, per task:

1. Draft (every `redraft_every`-th round of the task): sample `population_size` schedules from the
   design space (a share `init_measured_ratio` of them replayed from the task's best measured
   records), evolve them for `draft_generations` generations scored by the draft model (PSA), and
   keep the best `potential_size` distinct, never-measured schedules as the task's potential space.
   Other rounds reuse it (minus what was measured since).
2. Verify: the verify model (the tuning run's cost model, e.g. PAM) scores the pool = potential
   space + the best measured schedules (`pool_measured_ratio` of the measured ones, at most that
   share of the population), then evolves it `verify_generations` more generations scored by itself.
3. Measure the verifier's top n, with an epsilon-greedy share (`eps_greedy`) of random samples from
   the draft's initial population.
Cold start: while the verifier scores every pool member the same (no data yet), the potential space
is measured in PSA's order. The verifier scores about `potential_size` (+ one generation) schedules a
round, never the whole population of every generation; both models are counted (`SearchLog`).

Both generations use MetaSchedule's own C++ evolution (`SampleInitPopulation`,
`EvolveWithCostModel`: mutators, postprocessors, parallel over the context's threads) on inner
`EvolutionarySearch` objects that this strategy owns; the verify evolution gets a fresh inner search
each round, because the inner one forgets nothing it returned and the potential space is re-scored
every round.

`ResumableEvolutionarySearch` is MetaSchedule's default `EvolutionarySearch`, unchanged, in the same
frame: both strategies count the task's records already in the database against its trial budget and
never re-measure a schedule that is in it (`EvolutionarySearch` itself does neither), which is what
makes a tuning run resumable.

`SearchLog` collects one row per measured batch: candidates each model scored, seconds drafting,
verifying, building and running, the task's best latency and the weighted estimate of the whole
workload (sum of weight x best latency), which is the tuning curve.
"""

from __future__ import annotations

import csv
import logging
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from tvm.ir.utils import derived_object

from data.atomic import atomic_path
from data.labels import mean_latency
from tvm_env import ms, tvm_ffi

__all__ = [
    "CountingCostModel",
    "DraftVerifySearch",
    "ResumableEvolutionarySearch",
    "SearchLog",
    "read_rounds",
]

logger = logging.getLogger(__name__)

_SAMPLE_INIT = tvm_ffi.get_global_func("s_tir.meta_schedule.SearchStrategyEvolutionarySearchSampleInitPopulation")
_EVOLVE = tvm_ffi.get_global_func("s_tir.meta_schedule.SearchStrategyEvolutionarySearchEvolveWithCostModel")
_UNLIMITED = 1 << 30
"""Trial budget given to inner searches: the outer strategy owns the budget."""


def _key(sch: Any) -> int:
    """Structural hash of a schedule's module (the 'structural' module equality of the database)."""
    return int(tvm_ffi.structural_hash(sch.mod))


def _candidate(sch: Any) -> Any:
    return ms.MeasureCandidate(sch, ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True))


# ----------------------------------------------------------------------------------------------
# Counting wrapper
# ----------------------------------------------------------------------------------------------


@derived_object
class CountingCostModel(ms.cost_model.PyCostModel):
    """Delegates to `model`, counting the candidates it really scores (`scored`) and the seconds its
    `predict` took (`seconds`).

    With `cache=True`, scores are remembered by the structural hash of the candidate's module, so a
    schedule that reappears (unmutated parents, duplicates within a population, a pool scored again
    by the verify evolution) is not scored twice; `forget()` drops the memory (call it whenever the
    model changes). `update`, `save` and `load` go to `model`.
    """

    def __init__(self, *, model: Any, cache: bool = True):
        super().__init__()
        self.model, self.cache = model, cache
        self.scored = 0
        self.seconds = 0.0
        self._scores: dict[int, float] = {}

    def forget(self) -> None:
        self._scores.clear()

    def load(self, path: str) -> None:
        self.model.load(path)

    def save(self, path: str) -> None:
        self.model.save(path)

    def update(self, context, candidates, results) -> None:
        self.model.update(context, candidates, results)

    def predict(self, context, candidates) -> np.ndarray:
        """(n,) float64 scores of `model`, higher = faster."""
        candidates = list(candidates)
        if not self.cache:
            return self._score(context, candidates)
        keys = [_key(c.sch) for c in candidates]
        todo: dict[int, int] = {}
        for i, key in enumerate(keys):
            if key not in self._scores and key not in todo:
                todo[key] = i
        if todo:
            fresh = self._score(context, [candidates[i] for i in todo.values()])
            self._scores.update(zip(todo, fresh.tolist()))
        return np.array([self._scores[key] for key in keys], dtype=np.float64)

    def _score(self, context, candidates: list) -> np.ndarray:
        start = time.perf_counter()
        scores = np.asarray(self.model.predict(context, candidates), dtype=np.float64)
        self.seconds += time.perf_counter() - start
        self.scored += len(candidates)
        return scores


# ----------------------------------------------------------------------------------------------
# Strategies
# ----------------------------------------------------------------------------------------------


class _ResumableSearch(ms.search_strategy.PySearchStrategy):
    """The frame of both strategies: trial budget, database-aware dedupe, per-round log.

    Subclasses implement `_start()` (after `pre_tuning` set the fields below) and
    `_propose(n) -> list[Schedule] | None` (None ends the task), and may override `_finish()`.
    """

    def __init__(self, *, log: SearchLog | None = None, max_empty_rounds: int = 5):
        if max_empty_rounds < 1:
            raise ValueError(f"max_empty_rounds={max_empty_rounds!r} must be >= 1")
        self.log, self.max_empty_rounds = log, max_empty_rounds
        self.context: Any = None

    def _initialize_with_tune_context(self, context) -> None:
        self.context = context
        self.rng = np.random.default_rng(abs(int(context.rand_state)))

    def pre_tuning(self, max_trials, num_trials_per_iter, design_spaces, database=None, cost_model=None) -> None:
        if database is None or cost_model is None:
            raise ValueError(
                f"{type(self).__name__} needs a database and a cost model, got {database!r}, {cost_model!r}"
            )
        self.database, self.cost_model, self.design_spaces = database, cost_model, list(design_spaces)
        previous = []
        if database.has_workload(self.context.mod):
            workload = database.commit_workload(self.context.mod)
            previous = [r for r in database.get_all_tuning_records() if r.workload.same_as(workload)]
        self.measured = {_key(r.as_measure_candidate().sch) for r in previous}
        self.budget = max(0, int(max_trials) - len(previous))
        self.per_round = int(num_trials_per_iter)
        self.done = self.round = self.empty_rounds = 0
        if previous:
            logger.info("%s: %d trials already in the database, %d left", self.task_name, len(previous), self.budget)
        self._start()

    @property
    def task_name(self) -> str:
        return str(self.context.task_name)

    def post_tuning(self) -> None:
        self._finish()

    def generate_measure_candidates(self):
        n = min(self.per_round, self.budget - self.done)
        if n <= 0 or (self.log is not None and self.log.expired()):
            return None
        proposed = self._propose(n)
        if proposed is None:
            return None
        picked = []
        for sch in proposed:
            key = _key(sch)
            if key not in self.measured:
                self.measured.add(key)
                picked.append(sch)
                if len(picked) == n:
                    break
        self.round += 1
        if not picked:
            self.empty_rounds += 1
            if self.empty_rounds >= self.max_empty_rounds:
                logger.info("%s: no new schedules in %d rounds, stopping", self.task_name, self.empty_rounds)
                return None
        return [_candidate(sch) for sch in picked]

    def notify_runner_results(self, measure_candidates, results) -> None:
        self.done += len(results)
        self._notify(measure_candidates, results)

    def _start(self) -> None:
        raise NotImplementedError

    def _propose(self, n: int) -> list | None:
        raise NotImplementedError

    def _notify(self, measure_candidates, results) -> None:
        return None

    def _finish(self) -> None:
        return None


@derived_object
class ResumableEvolutionarySearch(_ResumableSearch):
    """MetaSchedule's default `EvolutionarySearch`, unchanged, made resumable and logged.

    The inner search runs with the tuning run's cost model (wrapped only to count what it scores);
    this wrapper adds the trial budget left after the records already in the database, skips
    schedules measured in an earlier run, and logs each round.
    """

    _REFILLS = 3

    def __init__(self, *, log: SearchLog | None = None, **evolutionary_search: Any):
        """
        Args:
            log: where rounds are logged (None: nowhere).
            **evolutionary_search: arguments of `ms.search_strategy.EvolutionarySearch`
                (population_size, init_measured_ratio, genetic_num_iters, eps_greedy, ...).
        """
        super().__init__(log=log)
        self.evolutionary_search = evolutionary_search
        ms.search_strategy.EvolutionarySearch(**evolutionary_search)  # fail early on bad arguments

    def _start(self) -> None:
        self.counted = CountingCostModel(model=self.cost_model, cache=False)
        self.inner = ms.search_strategy.EvolutionarySearch(**self.evolutionary_search)
        self.inner._initialize_with_tune_context(self.context)
        self.inner.pre_tuning(_UNLIMITED, self.per_round, self.design_spaces, self.database, self.counted)

    def _propose(self, n: int) -> list | None:
        """The inner search's next batch; on a resumed run, refilled (up to `_REFILLS` more rounds)
        while the inner search, which knows nothing of earlier runs, proposes measured schedules."""
        before, start = self.counted.scored, time.perf_counter()
        fresh: list | None = None
        for _ in range(1 + self._REFILLS):
            candidates = self.inner.generate_measure_candidates()
            if candidates is None:
                break
            fresh = (fresh or []) + [c.sch for c in candidates if _key(c.sch) not in self.measured]
            if len(fresh) >= n:
                break
        if self.log is not None:
            self.log.note_search(
                self.task_name, verify_scored=self.counted.scored - before, verify_s=time.perf_counter() - start
            )
        return fresh

    def _notify(self, measure_candidates, results) -> None:
        self.inner.notify_runner_results(measure_candidates, results)

    def _finish(self) -> None:
        self.inner.post_tuning()

    def clone(self) -> ResumableEvolutionarySearch:
        return ResumableEvolutionarySearch(log=self.log, **self.evolutionary_search)


@derived_object
class DraftVerifySearch(_ResumableSearch):
    """Pruner's draft-then-verify search (module docstring); the tuning run's cost model verifies."""

    def __init__(
        self,
        *,
        draft: Any,
        population_size: int = 1536,
        potential_size: int = 512,
        draft_generations: int = 2,
        verify_generations: int = 1,
        mutation_prob: float = 0.85,
        redraft_every: int = 2,
        init_measured_ratio: float = 0.2,
        pool_measured_ratio: float = 0.1,
        eps_greedy: float = 0.1,
        log: SearchLog | None = None,
    ):
        """
        Args:
            draft: the draft cost model (a `bridge.psa.PSACostModel`; any MetaSchedule cost model works).
            population_size: schedules sampled per draft (published: 1536).
            potential_size: best distinct unmeasured schedules the draft keeps (published: 512).
            draft_generations: evolution generations scored by the draft model (published: 2).
            verify_generations: further generations scored by the verify model (published: 1; 0 =
                only rank the pool).
            mutation_prob: probability that a child is a mutation rather than a copy (published: 0.85).
            redraft_every: draft a new potential space every this many rounds of the task (published: 2).
            init_measured_ratio: share of the draft's population replayed from the best measured records.
            pool_measured_ratio: share of the measured records (at most this share of the population)
                added to the verify pool as parents (published: 10%, up to 153).
            eps_greedy: share of each batch measured at random from the draft's samples (published: 0.1).
            log: where rounds are logged (None: nowhere).
        """
        super().__init__(log=log)
        for name, value in [
            ("population_size", population_size),
            ("potential_size", potential_size),
            ("redraft_every", redraft_every),
        ]:
            if value < 1:
                raise ValueError(f"{name}={value!r} must be >= 1")
        for name, value in [("draft_generations", draft_generations), ("verify_generations", verify_generations)]:
            if value < 0:
                raise ValueError(f"{name}={value!r} must be >= 0")
        for name, value in [
            ("mutation_prob", mutation_prob),
            ("init_measured_ratio", init_measured_ratio),
            ("pool_measured_ratio", pool_measured_ratio),
            ("eps_greedy", eps_greedy),
        ]:
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name}={value!r} must be in [0, 1]")
        if potential_size > population_size:
            raise ValueError(f"potential_size={potential_size!r} must be <= population_size={population_size!r}")
        self.draft = draft
        self.options = dict(
            population_size=population_size,
            potential_size=potential_size,
            draft_generations=draft_generations,
            verify_generations=verify_generations,
            mutation_prob=mutation_prob,
            redraft_every=redraft_every,
            init_measured_ratio=init_measured_ratio,
            pool_measured_ratio=pool_measured_ratio,
            eps_greedy=eps_greedy,
        )
        self.__dict__.update(self.options)

    def clone(self) -> DraftVerifySearch:
        return DraftVerifySearch(draft=self.draft, log=self.log, **self.options)

    @classmethod
    def from_config(cls, search: Any, *, log: SearchLog | None = None) -> DraftVerifySearch:
        """The search of a `bridge.config.SearchConfig` (psa set): PSA on that device row drafts."""
        from bridge.psa import PSACostModel

        return cls(
            draft=PSACostModel(device=search.psa, formula=search.psa_formula, devices_file=search.psa_devices),
            population_size=search.population or 1536,
            potential_size=search.potential,
            draft_generations=search.draft_generations,
            verify_generations=search.verify_generations,
            redraft_every=search.redraft_every,
            eps_greedy=search.eps_greedy,
            log=log,
        )

    def _evolutionary_search(self, population: int, generations: int, cost_model: Any) -> Any:
        inner = ms.search_strategy.EvolutionarySearch(
            population_size=population,
            init_measured_ratio=0.0,
            genetic_num_iters=generations,
            genetic_mutate_prob=self.mutation_prob,
            eps_greedy=0.0,
        )
        inner._initialize_with_tune_context(self.context)
        inner.pre_tuning(_UNLIMITED, max(self.per_round, 1), self.design_spaces, self.database, cost_model)
        return inner

    def _start(self) -> None:
        self.draft_model = CountingCostModel(model=self.draft)
        self.verify_model = CountingCostModel(model=self.cost_model)
        self.drafter = self._evolutionary_search(self.population_size, self.draft_generations, self.draft_model)
        # (structural hash, schedule) pairs, so a schedule is hashed once however many rounds it waits
        self._potential: list[tuple[int, Any]] = []
        self._samples: list[tuple[int, Any]] = []

    @property
    def potential(self) -> list:
        """The task's current potential space, best draft score first."""
        return [s for _, s in self._potential]

    def _finish(self) -> None:
        self.drafter.post_tuning()

    def _best_measured(self, limit: int) -> list:
        """Up to `limit` best measured schedules of the task, replayed with the postprocessors."""
        if limit <= 0 or not self.database.has_workload(self.context.mod):
            return []
        workload = self.database.commit_workload(self.context.mod)
        out = []
        for record in self.database.get_top_k(workload, limit):
            try:
                out.append(record.as_measure_candidate().sch)
            except Exception as err:
                logger.warning("%s: cannot replay a measured record: %s", self.task_name, err)
        return out

    def _draft(self) -> None:
        parents = self._best_measured(int(self.population_size * self.init_measured_ratio))
        samples = list(_SAMPLE_INIT(self.drafter, self.population_size - len(parents)))
        self._samples = [(_key(s), s) for s in samples]
        population = (parents + samples)[: self.population_size]
        evolved = list(_EVOLVE(self.drafter, population, self.potential_size)) if population else []
        self._potential = [(_key(s), s) for s in evolved]

    def _unmeasured(self, pairs: Sequence[tuple[int, Any]]) -> list[tuple[int, Any]]:
        return [(k, s) for k, s in pairs if k not in self.measured]

    def _propose(self, n: int) -> list | None:
        start = time.perf_counter()
        draft_before, verify_before = self.draft_model.scored, self.verify_model.scored
        self._potential = self._unmeasured(self._potential)
        drafted = self.round % self.redraft_every == 0 or not self._potential
        if drafted:
            self._draft()
            self._potential = self._unmeasured(self._potential)
        self._samples = self._unmeasured(self._samples)
        if not self._potential and not self._samples:
            return None
        verify_start = time.perf_counter()
        ranked, cold = self._verify()
        n_random = min(int(n * self.eps_greedy), len(self._samples))
        picks = ranked[: n - n_random]
        chosen = {k for k, _ in picks}
        extra = [pair for pair in self._samples if pair[0] not in chosen]
        for i in self.rng.permutation(len(extra))[: n - len(picks)]:
            picks.append(extra[i])
        if self.log is not None:
            self.log.note_search(
                self.task_name,
                draft_scored=self.draft_model.scored - draft_before,
                verify_scored=self.verify_model.scored - verify_before,
                draft_s=verify_start - start,
                verify_s=time.perf_counter() - verify_start,
                drafted=int(drafted),
                cold_start=int(cold),
            )
        return [s for _, s in picks]

    def _verify(self) -> tuple[list[tuple[int, Any]], bool]:
        """The potential space ranked by the verify model; (ranking, whether it was a cold start)."""
        self.verify_model.forget()  # the verifier may have been updated since the last round
        if not self._potential:
            return [], False
        scores = self.verify_model.predict(self.context, [_candidate(s) for _, s in self._potential])
        if np.ptp(scores) == 0.0:
            return list(self._potential), True
        if self.verify_generations == 0:
            return [self._potential[i] for i in np.argsort(-scores, kind="stable")], False
        limit = min(
            int(len(self.measured) * self.pool_measured_ratio), int(self.population_size * self.pool_measured_ratio)
        )
        pool = self.potential + self._best_measured(limit)
        verifier = self._evolutionary_search(len(pool), self.verify_generations, self.verify_model)
        try:
            # The heap holds as many as the pool: the measured parents and repeats are filtered out.
            best = list(_EVOLVE(verifier, pool, len(pool)))
        finally:
            verifier.post_tuning()
        return self._unmeasured([(_key(s), s) for s in best]), False


# ----------------------------------------------------------------------------------------------
# Per-round log: timed builder/runner and the measure callback that writes the rows
# ----------------------------------------------------------------------------------------------


@derived_object
class _TimedBuilder(ms.builder.PyBuilder):
    def __init__(self, *, builder: Any, log: SearchLog):
        super().__init__()
        self.builder, self.log = builder, log

    def build(self, build_inputs):
        start = time.perf_counter()
        results = self.builder.build(build_inputs)
        if len(build_inputs):
            self.log._builds.append((build_inputs[0].mod, time.perf_counter() - start))
        return results


@derived_object
class _TimedFuture(ms.runner.PyRunnerFuture):
    def __init__(self, *, future: Any, clock: list):
        super().__init__()
        self.future, self.clock = future, clock

    def done(self) -> bool:
        return self.future.done()

    def result(self):
        start = time.perf_counter()
        result = self.future.result()
        self.clock[0] += time.perf_counter() - start
        return result


@derived_object
class _TimedRunner(ms.runner.PyRunner):
    def __init__(self, *, runner: Any, log: SearchLog):
        super().__init__()
        self.runner, self.log = runner, log

    def run(self, runner_inputs):
        start = time.perf_counter()
        futures = self.runner.run(runner_inputs)
        clock = [time.perf_counter() - start]
        if len(runner_inputs):
            self.log._runs.append((str(runner_inputs[0].artifact_path), clock))
        return [_TimedFuture(future=f, clock=clock) for f in futures]


@derived_object
class _RoundCallback(ms.measure_callback.PyMeasureCallback):
    def __init__(self, *, log: SearchLog):
        super().__init__()
        self.log = log

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results) -> None:
        self.log._record(
            task_scheduler, int(task_id), list(measure_candidates), list(builder_results), list(runner_results)
        )


class SearchLog:
    """One row per measured batch of a tuning run (see `FIELDS`), shared by all tasks' strategies.

    Wire it with `tune_tasks(builder=log.builder(b), runner=log.runner(r),
    measure_callbacks=[*default callbacks, log.callback()])` and give it to the strategies. On a
    resumed run, pass what the earlier run left: the best latency per task name, the trials, the
    seconds and the rounds per task already spent, so the curve continues. With `deadline_s`, strategies start no new
    batch once this run has lasted that long.

    Attributes:
        rows: list of dicts with the `FIELDS` keys.
        best: task name -> best mean latency in seconds so far.
    """

    FIELDS = (
        "task",
        "round",
        "trials",
        "valid",
        "best_us",
        "draft_scored",
        "verify_scored",
        "draft_s",
        "verify_s",
        "build_s",
        "run_s",
        "drafted",
        "cold_start",
        "total_trials",
        "elapsed_s",
        "estimated_ms",
    )

    def __init__(
        self,
        *,
        best: Mapping[str, float] | None = None,
        trials_before: int = 0,
        seconds_before: float = 0.0,
        rounds_before: Mapping[str, int] | None = None,
        on_round: Callable[[dict], None] | None = None,
        deadline_s: float | None = None,
    ):
        self.best: dict[str, float] = dict(best or {})
        self.deadline_s = deadline_s
        self.total_trials, self.seconds_before = int(trials_before), float(seconds_before)
        self.on_round = on_round
        self.rows: list[dict] = []
        self.start = time.perf_counter()
        self._search: dict[str, dict] = {}
        self._rounds: dict[str, int] = dict(rounds_before or {})
        self._builds: list[tuple[Any, float]] = []
        self._runs: list[tuple[str, list]] = []

    def builder(self, builder: Any) -> Any:
        """`builder` wrapped to time each batch."""
        return _TimedBuilder(builder=builder, log=self)

    def runner(self, runner: Any) -> Any:
        """`runner` wrapped to time each batch (including waiting on asynchronous results)."""
        return _TimedRunner(runner=runner, log=self)

    def callback(self) -> Any:
        """The measure callback that writes a row per batch; put it after the default callbacks."""
        return _RoundCallback(log=self)

    def note_search(self, task: str, **stats: float) -> None:
        """Called by a strategy after it proposed a batch: counts and seconds of its search."""
        self._search[task] = stats

    def elapsed(self) -> float:
        """Seconds of search so far, earlier runs included."""
        return self.seconds_before + time.perf_counter() - self.start

    def expired(self) -> bool:
        """Whether this run passed its deadline (strategies then start no new batch)."""
        return self.deadline_s is not None and time.perf_counter() - self.start > self.deadline_s

    def _pop_build(self, candidates: list) -> float:
        for i, (mod, seconds) in enumerate(self._builds):
            if candidates and mod.same_as(candidates[0].sch.mod):
                del self._builds[i]
                return seconds
        return math.nan

    def _pop_run(self, builder_results: list) -> float:
        paths = [str(b.artifact_path) for b in builder_results if b.error_msg is None]
        for i, (path, clock) in enumerate(self._runs):
            if paths and path == paths[0]:
                del self._runs[i]
                return clock[0]
        return 0.0 if not paths else math.nan

    def estimated_total(self, weights: Mapping[str, float]) -> float:
        """Sum over tasks of weight x best latency, in seconds; inf until every task has one."""
        return float(sum(w * self.best.get(task, math.inf) for task, w in weights.items()))

    def _record(
        self, task_scheduler: Any, task_id: int, candidates: list, builder_results: list, runner_results: list
    ) -> None:
        tasks = list(task_scheduler.tasks_)
        task = str(tasks[task_id].ctx.task_name)
        latencies = [
            mean_latency(None if r.run_secs is None else [float(s) for s in r.run_secs])
            if b.error_msg is None
            else math.inf
            for b, r in zip(builder_results, runner_results)
        ]
        if latencies and min(latencies) < self.best.get(task, math.inf):
            self.best[task] = min(latencies)
        self.total_trials += len(candidates)
        self._rounds[task] = self._rounds.get(task, 0) + 1
        weights = {str(t.ctx.task_name): float(t.task_weight) for t in tasks}
        search = self._search.pop(task, {})
        row = dict.fromkeys(self.FIELDS, math.nan)
        row.update(
            task=task,
            round=self._rounds[task],
            trials=len(candidates),
            valid=sum(math.isfinite(x) for x in latencies),
            best_us=self.best.get(task, math.inf) * 1e6,
            build_s=self._pop_build(candidates),
            run_s=self._pop_run(builder_results),
            total_trials=self.total_trials,
            elapsed_s=self.elapsed(),
            estimated_ms=self.estimated_total(weights) * 1e3,
            **search,
        )
        self.rows.append(row)
        logger.info(
            "%s round %d: %d trials (%d valid), best %.2f us; scored draft %s verify %s; "
            "draft %.2fs verify %.2fs build %.2fs run %.2fs",
            task,
            row["round"],
            row["trials"],
            row["valid"],
            row["best_us"],
            row["draft_scored"],
            row["verify_scored"],
            row["draft_s"],
            row["verify_s"],
            row["build_s"],
            row["run_s"],
        )
        if self.on_round is not None:
            self.on_round(row)

    def write_csv(self, path: str | os.PathLike, previous: Sequence[dict] = ()) -> None:
        """Write `previous` rows (an earlier run's) and this run's rows to `path`, atomically."""
        with atomic_path(path) as tmp, open(tmp, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=self.FIELDS, extrasaction="ignore")
            writer.writeheader()
            writer.writerows([*previous, *self.rows])


def read_rounds(path: str | os.PathLike) -> list[dict]:
    """Rows of a CSV written by `SearchLog.write_csv` (numbers as floats); [] when it does not exist.

    Raises:
        ValueError: a file whose header is not `SearchLog.FIELDS`, or a malformed line (names the
            file and line).
    """
    if not os.path.exists(path):
        return []
    rows = []
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        if tuple(reader.fieldnames or ()) != SearchLog.FIELDS:
            raise ValueError(f"{path}: not a tuning-curve CSV (header {reader.fieldnames!r})")
        for line, raw in enumerate(reader, start=2):
            try:
                rows.append({k: (v if k == "task" else float(v)) for k, v in raw.items()})
            except (TypeError, ValueError) as err:
                raise ValueError(f"{path}:{line}: malformed tuning-curve row: {err}") from None
    return rows
