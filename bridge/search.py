"""Search strategies for MetaSchedule tuning runs: the resumable frame and MetaSchedule's own evolution.

Both strategies of a tuning run, `ResumableEvolutionarySearch` (MetaSchedule's default
`EvolutionarySearch`, unchanged, in our frame) and `bridge.draft_verify.DraftVerifySearch`
(Pruner's draft-then-verify), share `_ResumableSearch`: it counts the task's records already in the
database against its trial budget and never re-measures a schedule that is in it
(`EvolutionarySearch` itself does neither), which is what makes a tuning run resumable, and it logs
each round to a `bridge.search_log.SearchLog`. `CountingCostModel` counts (and optionally caches)
what a cost model scores, so the log can say how many candidates each model saw.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import numpy as np
from tvm.ir.utils import derived_object

from bridge.search_log import SearchLog
from data.features import schedule_key, schedule_keys
from data.labels import mean_latency
from data.replay import ReplayMemo, replay_records, task_records
from pruner_models.blend import blend_with_psa, check_weight
from tvm_env import ms

__all__ = ["CountingCostModel", "ResumableEvolutionarySearch", "candidate"]

logger = logging.getLogger(__name__)

_UNLIMITED = 1 << 30
"""Trial budget given to inner searches: the outer strategy owns the budget."""


def _key(sch: Any) -> int:
    """Structural hash of a schedule's module (the 'structural' module equality of the database)."""
    return schedule_key(sch.mod)


def _pairs(schs: Any) -> list[tuple[int, Any]]:
    """(`_key`, schedule) of each schedule, in order; a long list hashed on threads (`schedule_keys`)."""
    schs = list(schs)
    return list(zip(schedule_keys([s.mod for s in schs]), schs))


def _distinct(pairs: Any) -> list[tuple[int, Any]]:
    """`pairs` less the repeats of a key, each key's first kept, in order. Different traces can
    lower to one module (on a task with few real choices, e.g. a layer norm, many random samples
    do), and a batch must not hold one schedule twice."""
    seen: set[int] = set()
    return [pair for pair in pairs if not (pair[0] in seen or seen.add(pair[0]))]


def _replayed(records: list, threads: int, replays: ReplayMemo | None = None) -> list:
    """(record, its replayed candidate) of each of `records` that still replays, replayed on
    `threads` threads (`replay_records`), or taken from `replays` where the run's catch-up replayed
    them already; the others are left out with a warning."""
    candidates = (
        replays.replay(records, threads, keep=False) if replays is not None else replay_records(records, threads)
    )
    failed = sum(isinstance(c, Exception) for c in candidates)
    if failed:  # as `catch_up` and the best measured do: such a record cannot be re-measured either
        logger.warning("%d of %d database records no longer replay on their workload: left out", failed, len(records))
    return [(r, c) for r, c in zip(records, candidates) if not isinstance(c, Exception)]


def _keys_of(replayed: list) -> set[int]:
    """The keys of `_replayed`'s schedules (hashed on threads, `schedule_keys`)."""
    return set(schedule_keys([c.sch.mod for _, c in replayed]))


def _measured_keys(records: list, threads: int, replays: ReplayMemo | None = None) -> set[int]:
    """The keys of the schedules `records` hold (`_replayed`)."""
    return _keys_of(_replayed(records, threads, replays))


def _fastest(replayed: list, limit: int) -> list[tuple[float, Any]]:
    """(mean latency, schedule) of the `limit` fastest of `_replayed`'s pairs that ran, fastest first."""
    timed = [(mean_latency(r.run_secs), c.sch) for r, c in replayed]
    return sorted((t for t in timed if math.isfinite(t[0])), key=lambda t: t[0])[: max(0, limit)]


def candidate(sch: Any) -> Any:
    """The measure candidate of a schedule (what the builder and the cost models take)."""
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

    With `blend_with` (the draft model, PSA), each `predict` returns
    softplus(z(model) + blend_weight * z(log blend_with)), both standardized over the candidates of
    that call (one task's: `pruner_models.blend`): positive, since MetaSchedule's evolution samples
    parents in proportion to the scores, and in the blend's order. A `model` that scores every
    candidate the same (cold: no data yet) is passed through, so a search still sees its cold start.
    (Keep the weight below about 100: beyond, the softplus of the worst blends underflows to 0.)
    """

    def __init__(self, *, model: Any, cache: bool = True, blend_with: Any = None, blend_weight: float = 0.0):
        super().__init__()
        if blend_with is not None:
            check_weight(blend_weight, f"blend_weight={blend_weight!r}")
        self.model, self.cache = model, cache
        self.blend_with, self.blend_weight = blend_with, blend_weight
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
        """(n,) float64 scores of `model` (blended with `blend_with`'s, if set), higher = faster."""
        candidates = list(candidates)
        scores = self._cached(context, candidates) if self.cache else self._score(context, candidates)
        if self.blend_with is None or len(scores) < 2 or np.ptp(scores) == 0.0:
            return scores
        psa = np.asarray(self.blend_with.predict(context, candidates), dtype=np.float64)
        return np.logaddexp(0.0, blend_with_psa(scores, psa, None, self.blend_weight))

    def _cached(self, context, candidates: list) -> np.ndarray:
        keys = schedule_keys([c.sch.mod for c in candidates])
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
    `_propose(n) -> list[Schedule] | None` (None ends the task), and may override `_notify()`,
    `_ahead(n)` (a batch of n will follow: search for it in the background), `_next_batch()` and
    `_finish()`.
    """

    def __init__(self, *, log: SearchLog | None = None, max_empty_rounds: int = 5, replays: ReplayMemo | None = None):
        """`replays`: the run's `ReplayMemo`, whose replays of a task's records (the catch-up's) its
        `pre_tuning` takes instead of replaying them again (None: it replays them)."""
        if max_empty_rounds < 1:
            raise ValueError(f"max_empty_rounds={max_empty_rounds!r} must be >= 1")
        self.log, self.max_empty_rounds, self.replays = log, max_empty_rounds, replays
        self.context: Any = None
        self.best_replayed: list[tuple[float, Any]] | None = None  # `pre_tuning`'s (`_best_to_keep`)

    def _initialize_with_tune_context(self, context) -> None:
        self.context = context
        self.rng = np.random.default_rng(abs(int(context.rand_state)))

    def pre_tuning(self, max_trials, num_trials_per_iter, design_spaces, database=None, cost_model=None) -> None:
        if database is None or cost_model is None:
            raise ValueError(
                f"{type(self).__name__} needs a database and a cost model, got {database!r}, {cost_model!r}"
            )
        self.database, self.cost_model, self.design_spaces = database, cost_model, list(design_spaces)
        previous = task_records(database, self.context.mod)
        replayed = _replayed(previous, int(self.context.num_threads), self.replays)
        self.measured = _keys_of(replayed)
        self.best_replayed = _fastest(replayed, self._best_to_keep())
        self.best_before = min((mean_latency(r.run_secs) for r in previous), default=math.inf)
        self.budget = max(0, int(max_trials) - len(previous))
        self.per_round = self.batch = int(num_trials_per_iter)  # batch: the size of the next batch
        self.done = self.round = self.empty_rounds = 0
        self.handed_out_at: float | None = None  # when the last batch was handed out
        self.device_s = math.nan  # seconds from handing out the last measured batch to its results
        if previous:
            logger.info("%s: %d trials already in the database, %d left", self.task_name, len(previous), self.budget)
        self._start()

    @property
    def task_name(self) -> str:
        return str(self.context.task_name)

    def post_tuning(self) -> None:
        self._finish()

    def generate_measure_candidates(self):
        n = min(self.batch, self.budget - self.done)
        if n <= 0 or self._expired():
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
        self.batch = self._next_batch(len(picked))
        upcoming = min(self.batch, self.budget - self.done - len(picked))
        if upcoming > 0 and not self._expired():
            self._ahead(upcoming, later=self.budget - self.done - len(picked) - upcoming)
        self.handed_out_at = time.perf_counter()
        return [candidate(sch) for sch in picked]

    def notify_runner_results(self, measure_candidates, results) -> None:
        self.done += len(results)
        if self.handed_out_at is not None:
            self.device_s = time.perf_counter() - self.handed_out_at
        self._notify(measure_candidates, results)

    def _expired(self) -> bool:
        return self.log is not None and self.log.expired()

    def _best_to_keep(self) -> int:
        """How many of the database's fastest replayed records `pre_tuning` keeps (`best_replayed`)
        for the strategy's own use, so that it need not replay them again (none here)."""
        return 0

    def _start(self) -> None:
        raise NotImplementedError

    def _propose(self, n: int) -> list | None:
        raise NotImplementedError

    def _notify(self, measure_candidates, results) -> None:
        return None

    def _next_batch(self, current: int) -> int:
        """The size of the batch after the one of `current` trials just handed out (default: the
        run's trials per round; `DraftVerifySearch` may grow it, `bridge.fill_rule`)."""
        return self.per_round

    def _ahead(self, n: int, later: int = 0) -> None:
        """Called after a batch was handed out (and its schedules marked measured) when another batch
        of `n` will follow, and `later` trials of the budget after that one: a pipelined strategy
        starts searching for it here."""
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

    def __init__(self, *, log: SearchLog | None = None, replays: ReplayMemo | None = None, **evolutionary_search: Any):
        """
        Args:
            log: where rounds are logged (None: nowhere).
            replays: the run's `data.replay.ReplayMemo` (`_ResumableSearch`).
            **evolutionary_search: arguments of `ms.search_strategy.EvolutionarySearch`
                (population_size, init_measured_ratio, genetic_num_iters, eps_greedy, ...).
        """
        super().__init__(log=log, replays=replays)
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
        return ResumableEvolutionarySearch(log=self.log, replays=self.replays, **self.evolutionary_search)
