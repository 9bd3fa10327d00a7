"""Tune a list of tasks with MetaSchedule, one of our cost models and (optionally) draft-then-verify.

The Python API behind tune.py and benchmarks/:

    from bridge.config import CostModelConfig, SearchConfig, TuneConfig
    from bridge.tuning import tune_tasks
    result = tune_tasks([data.zoo.operator_task("matmul:512,512,512")], "nvidia/nvidia-h100",
                        TuneConfig(out="runs/mm", trials=200), search=SearchConfig(psa="h100"),
                        cost_model=CostModelConfig(name="pam-siamese-update", checkpoint="pam.pt"))

Everything goes to `TuneConfig.out`: the MetaSchedule database (database_*.json), the tuning curve
(tuning_curve.csv: one row per measured batch with the per-round search statistics), the cost
model's state (cost_model.<name>.bin) and MetaSchedule's logs. The curve and the cost model's state
are rewritten atomically after EVERY measured batch, so a `kill -9` loses at most the batch in
flight (our cost models write their state once their training on the batch, in the background, is
done: the state a kill leaves may miss the last batch or two, which the database keeps; on resume
`bridge.catch_up` hands the model those records). Running again on the same dir resumes: torn database lines are skipped and reported
(bridge.database), trials already spent count against `trials`, measured schedules are not measured
again, the cost model and the curve continue.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bridge.catch_up import catch_up
from bridge.config import CostModelConfig, MeasureConfig, SearchConfig, TuneConfig
from bridge.database import open_database
from bridge.factory import load_state, make_cost_model, make_strategy, resolve_first_draft_threads, save_state
from bridge.report import plot_tuning
from bridge.reread import clear_reread, reread_best, reread_count
from bridge.workers import check_device, make_runner, start_workers, walks_tir
from data.replay import ReplayMemo
from tvm_env import (
    ReusingRunner,
    ms,
    parse_target,
    setup,
    target_spec,
    task_context,
    task_loggers,
    usable_cores,
)

__all__ = [
    "CURVE_CSV",
    "CURVE_PNG",
    "TaskResult",
    "TuneResult",
    "records_by_task",
    "target_label",
    "target_spec",
    "title",
    "tune_tasks",
]

log = logging.getLogger(__name__)

CURVE_CSV, CURVE_PNG = "tuning_curve.csv", "tuning_curve.png"


@dataclasses.dataclass
class TaskResult:
    """One task after tuning: trials in the database and the best mean latency (inf: none valid)."""

    name: str
    weight: float
    flops: float
    trials: int
    best_s: float

    @property
    def gflops(self) -> float:
        return self.flops / self.best_s / 1e9 if math.isfinite(self.best_s) and self.best_s > 0 else 0.0


@dataclasses.dataclass
class TuneResult:
    """What a tuning run leaves: per-task results, the curve rows (earlier runs' first) and times.

    Attributes:
        skipped_lines: database lines skipped as torn or corrupt on opening (`file:line: reason`).
        build_workers: the builder's parallel builds (0: not known, e.g. a caller's own builder).
        reread: task name -> its `bridge.reread.Reread` ({}: none asked for, or it failed).
        reread_s: the re-read's seconds, after the search (not in `search_s`).
    """

    tasks: list[TaskResult]
    rows: list[dict]
    search_s: float
    database: Any
    skipped_lines: list[str] = dataclasses.field(default_factory=list)
    build_workers: int = 0
    reread: dict = dataclasses.field(default_factory=dict)
    reread_s: float = 0.0

    @property
    def estimated_s(self) -> float:
        """Sum over tasks of weight x best latency (inf while a task has no valid measurement)."""
        return float(sum(t.weight * t.best_s for t in self.tasks))

    @property
    def device_idle(self) -> dict[str, float]:
        """Share of the run's wall-clock time in which no batch ran (`idle`), and where it fell
        (`bridge.curve.device_idle_parts`); NaN without curve rows."""
        from bridge.curve import device_idle_parts, device_idle_share

        return {"idle": device_idle_share(self.rows), **device_idle_parts(self.rows)}

    @property
    def first_rounds_s(self) -> float:
        """When every task had its first round's results taken up (`bridge.curve.first_rounds_done`)."""
        from bridge.curve import first_rounds_done

        return first_rounds_done(self.rows, len(self.tasks))

    @property
    def host_cpu_busy(self) -> float:
        """Share of the host's cores this process and its workers kept busy (`bridge.curve.host_cpu_busy`)."""
        from bridge.curve import host_cpu_busy

        return host_cpu_busy(self.rows)

    @property
    def builds(self) -> dict[str, float]:
        """`busy`: the median share of the build workers' time a batch kept them busy
        (`bridge.curve.build_busy`; NaN when not known); `deferred`: picks whose build a batch
        left to the next one (`SearchConfig.straggler_grace`); `refused`: picks the source guard
        refused (`MeasureConfig.max_source_kb`)."""
        from bridge.curve import build_busy, deferred_picks, refused_picks

        return {
            "busy": build_busy(self.rows, self.build_workers),
            "deferred": float(deferred_picks(self.rows)),
            "refused": float(refused_picks(self.rows)),
        }


def records_by_task(database: Any, tasks: Sequence[Any]) -> dict[str, tuple[int, float]]:
    """Task name -> (records in the database, best mean latency in seconds)."""
    from data.labels import mean_latency

    out = {}
    records = database.get_all_tuning_records() if len(tasks) else []
    for task in tasks:
        if not database.has_workload(task.mod):
            out[task.name] = (0, math.inf)
            continue
        workload = database.commit_workload(task.mod)
        mine = [r for r in records if r.workload.same_as(workload)]
        lat = [mean_latency(r.run_secs) for r in mine]
        out[task.name] = (len(mine), min(lat, default=math.inf))
    return out


def target_label(target: Any) -> str:
    """Short name of a target for titles: its kind and CPU / architecture ("llvm native", "cuda sm_90a")."""
    spec = target.export()
    detail = spec.get("mcpu") or spec.get("arch") or spec.get("model") or ""
    return f"{spec.get('kind')} {detail}".strip()


def title(workload: str, target: Any, cost_model: CostModelConfig, search: SearchConfig) -> str:
    """Plot title: workload, target, cost model and search."""
    if len(workload) > 80:
        workload = workload[:77] + "..."
    draft = f" + PSA({search.psa}) draft" if search.psa else ""
    return f"{workload} on {target_label(target)}; cost model {cost_model.name}{draft}"


def _progress(total: int, initial: int, enabled: bool) -> tuple[Any, Callable[[dict], None]]:
    """A tqdm bar over trials that moves once per measured batch, with the estimate ("n/a" until valid)."""
    from tqdm import tqdm

    bar = tqdm(total=total, initial=initial, unit="trial", desc="tune", dynamic_ncols=True, disable=not enabled)
    bar.set_postfix_str("est n/a")

    def update(row: dict) -> None:
        est = row["estimated_ms"]
        bar.set_postfix_str(f"est {est:.4g} ms" if math.isfinite(est) else "est n/a", refresh=False)
        bar.update(int(row["trials"]))

    return bar, update


def tune_tasks(
    tasks: Sequence[Any],
    target: Any,
    config: TuneConfig,
    *,
    search: SearchConfig | None = None,
    cost_model: CostModelConfig | None = None,
    measure: MeasureConfig | None = None,
    builder: Any = None,
    runner: Any = None,
    walk_pool: Any = None,
    progress: bool = True,
    on_round: Callable[[dict], None] | None = None,
    label: str | None = None,
) -> TuneResult:
    """Tune `tasks` (data.zoo.TaskSpec list) on `target` into `config.out`, resuming what is there.

    Args:
        tasks: the workloads (name, mod, weight, flops).
        target: a Target, tag, dict or JSON string.
        config: budget, seed, deadline and output dir.
        search: draft-then-verify (psa set) or MetaSchedule's evolution (default: evolution).
        cost_model: which cost model (default: pam); its seed defaults to `config.seed`.
        measure: builder and runner settings (default: local, number=3, repeat=1, min_repeat_ms=100).
        builder: a MetaSchedule Builder to use instead of a new PooledLocalBuilder (e.g. one shared by
            several runs of one process, so its workers start once).
        runner: a MetaSchedule Runner to use instead of the one `measure` describes (the device
            check is then the runner's business).
        walk_pool: a `data.features.WalkPool` to walk the TIR on instead of a new one (e.g. one
            started before the tasks were extracted, or shared by several runs of one process: its
            16 processes each import TVM, which made a run's first draft 8-10 s longer).
        progress: show a progress bar of the trials.
        on_round: called with each curve row after it is saved (e.g. W&B logging).
        label: the workload's name in the plot title (default: the task names).

    Returns:
        The TuneResult (the database is left in `config.out`).

    Raises:
        ValueError: a bad argument, a missing device, or unusable saved state (names the file).
    """
    search = search or SearchConfig()
    cost_model = cost_model or CostModelConfig(seed=config.seed)
    measure = measure or MeasureConfig()
    if getattr(builder, "artifact", "tar") == "so" and (measure.runner != "local" or runner is not None):
        # a runner passed in may be an RPC device's, which links the .tar with its own compiler
        raise ValueError("a builder of .so artifacts needs the local runner that `measure` describes, not runner=")
    from bridge.pipeline import Pipeline, PrefetchBuilder
    from bridge.search_log import SearchLog, read_rounds
    from data.features import FeatureCache

    with contextlib.ExitStack() as owned:  # the pools this call started end with it (PooledLocalBuilder.shutdown)
        target = parse_target(target)
        setup(target)
        if runner is None:
            check_device(target, measure)
            runner = make_runner(measure, target)  # its worker starts in the background from here
            if hasattr(runner, "shutdown"):
                owned.callback(runner.shutdown)
        out = Path(config.out)
        out.mkdir(parents=True, exist_ok=True)
        cores = int(target.export().get("num-cores", usable_cores()))
        search = resolve_first_draft_threads(search, cores, len(tasks))  # as tune.py records it
        database, skipped = open_database(out)
        before = records_by_task(database, tasks)
        previous_rows = read_rounds(out / CURVE_CSV)
        spent = sum(n for n, _ in before.values())
        search_log = SearchLog(
            best={name: best for name, (_, best) in before.items() if math.isfinite(best)},
            trials_before=spent,
            seconds_before=previous_rows[-1]["elapsed_s"] if previous_rows else 0.0,
            draft_wall_before=previous_rows[-1]["draft_wall_s"] if previous_rows else 0.0,
            rounds_before=collections.Counter(r["task"] for r in previous_rows),
            deadline_s=config.deadline,
        )
        # One feature cache (and walk pool) for the draft and the verifier; one pipeline for all tasks.
        if walk_pool is None:  # its processes start while the tasks' design spaces are generated
            _, walk_pool = start_workers(target, measure, walk=walks_tir(search, cost_model), build=False)
            owned.callback(walk_pool.close)
        features = FeatureCache(pool=walk_pool)
        if builder is None:  # its workers import TVM (seconds) while the first search runs, not in the first build
            builder, _ = start_workers(target, measure, walk=False)
            owned.callback(builder.shutdown)
        prefetch = (
            PrefetchBuilder(builder=builder, straggler_grace=search.straggler_grace)
            if search.psa is not None and search.pipeline
            else None
        )
        pipeline = Pipeline(prefetch, build_apart=search.build_apart)
        model = make_cost_model(cost_model, target=target, cores=cores, features=features)
        resumed = load_state(model, out, cost_model.name)
        if hasattr(model, "learn_s"):  # our cost models: their training time in the curve
            search_log.learning = lambda: (model.learn_s, model.learn_wait_s)
        replays = ReplayMemo()  # a resumed task's records: replayed once, for the catch-up and the search
        loggers = task_loggers(str(out), [t.name for t in tasks])
        strategy = make_strategy(
            search,
            cost_model=cost_model.name,
            adapt_every=cost_model.adapt_every,
            log=search_log,
            features=features,
            pipeline=pipeline,
            replays=replays,
            loggers={task.name: logger for task, logger in zip(tasks, loggers)},  # a first draft's own context's
        )
        contexts = [
            task_context(task.mod, target, strategy, task.name, threads=cores, seed=rand_state, logger=logger).clone()
            for task, logger, rand_state in zip(tasks, loggers, ms.utils.fork_seed(config.seed, n=len(tasks)))
        ]
        if resumed or spent:  # a state a kill left behind the database, or none yet: learn what it missed
            for context in contexts:
                catch_up(model, context, database, replays)
        remaining = config.trials - spent
        if remaining > 0:
            clear_reread(out)  # the run may find better schedules than the last re-read's
            bar, advance = _progress(config.trials, spent, progress)

            def after_round(row: dict) -> None:
                # The database already holds this batch (AddToDatabase runs first) and the cost model
                # was given it (UpdateCostModel): save both companions now, atomically, the cost model
                # first. Our models write their state once their training on the batch, in the
                # background, is done (the loop goes on meanwhile): on disk is always a state whose
                # network learned from every record beside it, one batch behind the curve at most.
                save_state(model, out, cost_model.name, wait=False)
                search_log.write_csv(out / CURVE_CSV, previous_rows)
                advance(row)
                if on_round is not None:
                    on_round(row)

            search_log.on_round = after_round
            try:
                ms.tune_tasks(
                    tasks=contexts,
                    task_weights=[float(t.weight) for t in tasks],
                    work_dir=str(out),
                    max_trials_global=remaining,
                    max_trials_per_task=config.max_trials_per_task or config.trials,
                    num_trials_per_iter=config.trials_per_round,
                    builder=search_log.builder(prefetch or builder),
                    runner=search_log.runner(ReusingRunner(runner=runner) if measure.reuse_kernels else runner),
                    database=database,
                    cost_model=model,
                    measure_callbacks=search_log.callbacks(),
                    task_scheduler=ms.task_scheduler.GradientBased(seed=config.seed),
                )
            finally:
                pipeline.close()
                bar.close()
                search_log.write_csv(out / CURVE_CSV, previous_rows)
                save_state(model, out, cost_model.name)
        else:
            log.info("the output dir already holds %d trials (budget %d): nothing to tune", spent, config.trials)
        after = records_by_task(database, tasks)
        reread, reread_s = _reread(model, database, tasks, target, builder, runner, measure, out)
        rows = [*previous_rows, *search_log.rows]
        plot_tuning(
            rows, out / CURVE_PNG, title=title(label or ", ".join(t.name for t in tasks), target, cost_model, search)
        )
        return TuneResult(
            tasks=[TaskResult(t.name, float(t.weight), float(t.flops), *after[t.name]) for t in tasks],
            rows=rows,
            search_s=search_log.elapsed() if remaining > 0 else search_log.seconds_before,
            database=database,
            skipped_lines=skipped,
            build_workers=int(getattr(builder, "max_workers", 0) or 0),
            reread=reread,
            reread_s=reread_s,
        )


def _reread(model, database, tasks, target, builder, runner, measure, out: Path) -> tuple[dict, float]:
    """The run's re-read (`bridge.reread`; `MeasureConfig.reread_top`) and its seconds. Our cost model's
    training in the background is waited for first (a resume's catch-up may have started one), so the
    device is quiet. A re-read that fails is said in the log, and the run's results stand without it;
    with none asked for, an earlier run's re-read is removed (the compile then takes the run's own best)."""
    top = reread_count(measure.reread_top, target)
    if not top:
        clear_reread(out)
        return {}, 0.0
    getattr(model, "trained", None)  # our cost models: waits for a training in the background
    start = time.perf_counter()
    try:
        found = reread_best(database, tasks, target, builder=builder, runner=runner, top=top, out=out)
    except Exception as err:  # noqa: BLE001 - the search's results stand; only the re-read is lost
        log.warning("the re-read of the best records failed, the run's own readings stand: %s", err)
        clear_reread(out)
        found = {}
    return found, time.perf_counter() - start
