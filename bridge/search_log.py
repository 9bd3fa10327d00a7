"""The per-round log of a tuning run (`SearchLog`): the tuning curve and where each round's time went.

One row per measured batch: candidates each model scored, seconds drafting and verifying (on the
search's background thread when rounds are pipelined, see `bridge.pipeline`), seconds the tuning
loop waited on the search (`wait_s`: what the search really cost the run), building, running and
updating the cost model, the task's best latency and the weighted estimate of the whole workload
(sum of weight x best latency), which is the tuning curve. `read_rounds` reads a saved curve back;
`bridge.curve` reads where a run's time went from its rows.
"""

from __future__ import annotations

import csv
import logging
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tvm.ir.utils import derived_object

from bridge.host_cpu import host_seconds
from bridge.span_union import SpanUnion
from data.atomic import atomic_path
from data.labels import mean_latency
from tvm_env import ms, nvrtc, usable_cores

__all__ = ["SearchLog", "read_rounds"]

logger = logging.getLogger(__name__)


@derived_object
class _TimedBuilder(ms.builder.PyBuilder):
    def __init__(self, *, builder: Any, log: SearchLog):
        super().__init__()
        self.builder, self.log = builder, log

    def build(self, build_inputs):
        start = time.perf_counter()
        results = self.builder.build(build_inputs)
        if len(build_inputs):
            seconds = time.perf_counter() - start
            # a PrefetchBuilder's own figures of this build: a prefetch on the pipeline's thread may have set
            # its last_batch since
            told = getattr(self.builder, "built_batch", None)
            told = getattr(self.builder, "last_batch", {}) if told is None else told
            self.log._builds.append((build_inputs[0].mod, seconds, dict(told)))
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
        started, start = self.log.elapsed(), time.perf_counter()
        futures = self.runner.run(runner_inputs)
        clock = [time.perf_counter() - start]
        if len(runner_inputs):
            self.log._runs.append((str(runner_inputs[0].artifact_path), clock, started))
        return [_TimedFuture(future=f, clock=clock) for f in futures]


@derived_object
class _MarkCallback(ms.measure_callback.PyMeasureCallback):
    """Notes the time just before the cost model's update (the callback after it)."""

    def __init__(self, *, log: SearchLog):
        super().__init__()
        self.log = log

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results) -> None:
        self.log._update_start = time.perf_counter()


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
    measure_callbacks=log.callbacks())` and give it to the strategies. On a
    resumed run, pass what the earlier run left: the best latency per task name, the trials, the
    seconds, the drafting seconds (`draft_wall_s`) and the rounds per task already spent, so the curve
    continues. With `deadline_s`, strategies start no new
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
        "sample_s",
        "samples",
        "verify_s",
        "psa_s",  # seconds in the draft model's predict (featurize + score) in the draft the round's batch came from
        "verifier_s",  # seconds in the verify model's predict (the rest of verify_s: its evolution)
        "build_s",
        "run_s",
        "run_start_s",  # the run's elapsed seconds when the batch went to the runner (a network's rows come at join)
        "drafted",  # 1: the batch came from a new draft (drafted in turn, or taken up from the background)
        "draft_started",  # 1: the round started a draft alongside (draft_ahead); a later round takes it up
        "draft_wait_s",  # seconds the round's search waited for a draft started alongside
        "draft_wall_s",  # seconds of the run so far during which a draft ran, drafts at once counted once
        "draft_held",  # 1: a draft was due on a stall (or, low_draft_ahead, a low space), held by redraft_share
        "cold_start",
        "gated",  # 1: ranked by the draft model, the verify gate's choice (verify_gate)
        "verifier_acc",  # the gate's running pairwise accuracy of the verifier on measured batches
        "draft_acc",  # the same of the draft model
        "wait_s",
        "prebuild_s",  # seconds from starting the batch's build ahead until the job found its picks built
        "job_s",  # seconds of the background job that built the batch (with search_ahead 2, beside the next search)
        "build_cpu_s",  # CPU seconds the build workers spent on the batch (built ahead or not)
        "build_work_s",  # the build workers' summed wall seconds on it (tvm_env.builder.BATCH_KEYS)
        "compiles_cached",  # its CUDA compiles taken from the build pool's folder (tvm_env.compile_cache)
        "reused",  # picks whose kernel was measured already, given that measurement (--reuse-kernels)
        "deferred",  # picks searched for this batch whose build was still running when it was due (in the next batch)
        "refused",  # picks the builder refused over its source guard (--max-source-kb): failed, never compiled
        "size_dropped",  # picks the search passed over as estimated over --size-filter-kb (bridge.size_filter)
        "local",  # picks that were local moves around the task's best measured schedules (local_share)
        "update_s",  # seconds of MetaSchedule's cost-model update callback (our models: recording the batch)
        "learn_s",  # seconds our cost model trained since the last row (in the background, or within update_s)
        "learn_wait_s",  # seconds since the last row that scoring or a save waited for such training
        "host_cpu_s",  # CPU seconds of this process and its workers since the last row (bridge.host_cpu)
        "host_cores",  # the cores this process may run on (tvm_env.usable_cores): host_cpu_s / (wall x this) = busy
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
        draft_wall_before: float = 0.0,
        rounds_before: Mapping[str, int] | None = None,
        on_round: Callable[[dict], None] | None = None,
        deadline_s: float | None = None,
    ):
        self.best: dict[str, float] = dict(best or {})
        self.deadline_s = deadline_s
        self.total_trials, self.seconds_before = int(trials_before), float(seconds_before)
        self.draft_wall_before = float(draft_wall_before)  # NaN: an earlier run's curve did not log it
        self._drafting = SpanUnion()  # this run's drafts on its clock (`draft_wall_s`)
        self.on_round = on_round
        self.learning: Callable[[], tuple[float, float]] | None = None  # (learn_s, learn_wait_s) so far
        self._learned = (0.0, 0.0)
        self.rows: list[dict] = []
        self.start = time.perf_counter()
        self._search: dict[str, dict] = {}
        self._rounds: dict[str, int] = dict(rounds_before or {})
        self._builds: list[tuple[Any, float, dict]] = []
        self._update_start: float | None = None
        self._runs: list[tuple[str, list, float]] = []
        self._reusing: Any = None  # a ReusingRunner, whose reused candidates each row counts
        self._cpu = host_seconds()  # the host's CPU seconds at the last row (or the run's start)

    def builder(self, builder: Any) -> Any:
        """`builder` wrapped to time each batch."""
        return _TimedBuilder(builder=builder, log=self)

    def runner(self, runner: Any) -> Any:
        """`runner` wrapped to time each batch (including waiting on asynchronous results); a
        `tvm_env.kernel_reuse.ReusingRunner` has its reused candidates counted in each row."""
        if hasattr(runner, "take_reused"):
            runner.count_reused, self._reusing = True, runner
        return _TimedRunner(runner=runner, log=self)

    def callback(self) -> Any:
        """The measure callback that writes a row per batch; put it after the default callbacks."""
        return _RoundCallback(log=self)

    def callbacks(self) -> list:
        """MetaSchedule's default callbacks (add to database, remove artifacts, update the cost model)
        with the update timed, then the row writer."""
        default = list(ms.measure_callback.MeasureCallback.create("default"))
        *before, update = default
        return [*before, _MarkCallback(log=self), update, _RoundCallback(log=self)]

    def note_search(self, task: str, **stats: float) -> None:
        """Called by a strategy after it proposed a batch: counts and seconds of its search."""
        self._search[task] = stats

    def searched(self, task: str) -> dict:
        """The stats of `task`'s last search, before its batch's row takes them (for benchmarks)."""
        return dict(self._search.get(task, {}))

    def elapsed(self) -> float:
        """Seconds of search so far, earlier runs included."""
        return self.seconds_before + time.perf_counter() - self.start

    def expired(self) -> bool:
        """Whether this run passed its deadline (strategies then start no new batch)."""
        return self.deadline_s is not None and time.perf_counter() - self.start > self.deadline_s

    def _pop_build(self, candidates: list) -> tuple[float, dict]:
        """The seconds the loop's build of this batch took, and what its builder told of it."""
        for i, (mod, seconds, told) in enumerate(self._builds):
            if candidates and mod.same_as(candidates[0].sch.mod):
                del self._builds[i]
                return seconds, told
        return math.nan, {}

    def _pop_run(self, builder_results: list) -> dict[str, float]:
        """The batch's run_s (seconds in the runner's run and results) and run_start_s."""
        paths = [str(b.artifact_path) for b in builder_results if b.error_msg is None]
        for i, (path, clock, started) in enumerate(self._runs):
            if paths and path == paths[0]:
                del self._runs[i]
                return {"run_s": clock[0], "run_start_s": started}
        return {"run_s": 0.0 if not paths else math.nan}

    def _reused(self, builder_results: list) -> float:
        """How many of the batch took a measurement made before (NaN without a ReusingRunner)."""
        if self._reusing is None:
            return math.nan
        return float(self._reusing.take_reused([str(b.artifact_path) for b in builder_results if b.artifact_path]))

    def estimated_total(self, weights: Mapping[str, float]) -> float:
        """Sum over tasks of weight x best latency, in seconds; inf until every task has one."""
        return float(sum(w * self.best.get(task, math.inf) for task, w in weights.items()))

    def _learning(self) -> dict[str, float]:
        """learn_s and learn_wait_s since the last row (NaN without `learning`, e.g. for XGB)."""
        if self.learning is None:
            return {}
        now = self.learning()
        since = {key: b - a for key, a, b in zip(("learn_s", "learn_wait_s"), self._learned, now)}
        self._learned = now
        return since

    def _host_cpu(self) -> dict[str, float]:
        """host_cpu_s since the last row, and host_cores."""
        now = host_seconds()
        since, self._cpu = now - self._cpu, now
        return {"host_cpu_s": since, "host_cores": float(usable_cores())}

    def _record(
        self, task_scheduler: Any, task_id: int, candidates: list, builder_results: list, runner_results: list
    ) -> None:
        tasks = list(task_scheduler.tasks_)
        task = str(tasks[task_id].ctx.task_name)
        latencies = [
            mean_latency(r.run_secs) if b.error_msg is None else math.inf
            for b, r in zip(builder_results, runner_results)
        ]
        if latencies and min(latencies) < self.best.get(task, math.inf):
            self.best[task] = min(latencies)
        self.total_trials += len(candidates)
        self._rounds[task] = self._rounds.get(task, 0) + 1
        weights = {str(t.ctx.task_name): float(t.task_weight) for t in tasks}
        search = self._search.pop(task, {})
        for start, end in search.pop("draft_spans", ()):  # the drafts the batch's search took up or ran
            self._drafting.add(self.seconds_before + start - self.start, self.seconds_before + end - self.start)
        build_s, built = self._pop_build(candidates)
        row = dict.fromkeys(self.FIELDS, math.nan)
        row.update(built)  # a batch built ahead has its build's figures in `search`, which wins
        row.update(
            task=task,
            round=self._rounds[task],
            trials=len(candidates),
            valid=sum(math.isfinite(x) for x in latencies),
            refused=sum(nvrtc.is_refused(b.error_msg) for b in builder_results),
            best_us=self.best.get(task, math.inf) * 1e6,
            build_s=build_s,
            reused=self._reused(builder_results),
            total_trials=self.total_trials,
            elapsed_s=self.elapsed(),
            update_s=math.nan if self._update_start is None else time.perf_counter() - self._update_start,
            **self._learning(),
            **self._pop_run(builder_results),
            estimated_ms=self.estimated_total(weights) * 1e3,
            **self._host_cpu(),
            draft_wall_s=self.draft_wall_before + self._drafting.seconds,
            **search,
        )
        self._update_start = None
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
        ValueError: a file whose header is not a subset of `SearchLog.FIELDS` with "task" (an
            earlier version's curve lacks some columns: they read as NaN), or a malformed line (names the
            file and line).
    """
    if not os.path.exists(path):
        return []
    rows = []
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        header = tuple(reader.fieldnames or ())
        if "task" not in header or not set(header) <= set(SearchLog.FIELDS):
            raise ValueError(f"{path}: not a tuning-curve CSV (header {reader.fieldnames!r})")
        for line, raw in enumerate(reader, start=2):
            try:
                row = dict.fromkeys(SearchLog.FIELDS, math.nan)
                row.update({k: (v if k == "task" else float(v)) for k, v in raw.items()})
                rows.append(row)
            except (TypeError, ValueError) as err:
                raise ValueError(f"{path}:{line}: malformed tuning-curve row: {err}") from None
    return rows
