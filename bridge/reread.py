"""Each task's best schedules measured again once the search has stopped: finals read with the device quiet.

While a run searches, our cost models score and train on the GPU the runner measures on, in short
bursts between and during batches. On an H200, another process that keeps the GPU busy a tenth of the
time takes about 0.18 us off every kernel launch (a CUDA graph's gap between two empty kernels, 0.91
us alone, read 0.73-0.76 us; a process that only holds its CUDA context changes nothing):
docs/benchmarks.md, "The graph timer's low readings: another process's bursts on the GPU". A run that
reads a 2-4 us kernel over a thousand times then keeps a best reading 5-8% under the same kernel read
alone; with the cost model on the CPU (`--model-device cpu`) four runs' bests read within 0.4% of it.

`reread_best` measures each task's `top` best valid records again after the search, with the run's
own builder and runner (so with its timer and settings), `rounds` times each, the candidates
interleaved round by round (`measure_rounds`); a candidate's re-read is the median of its rounds, and
a task's re-read final the least of its candidates' (so slightly low-biased by the choice among a few
noisy medians). It writes the re-read records (their traces, with the median as their one
`run_secs`) to a database of their own, `reread/` in the output dir, and `tuned_database` puts that
one first: the network's compile then takes each task's best re-read schedule, not the best reading
of the run. A tuning run (`bridge.tuning.tune_tasks`) removes the old re-read when it starts to tune
and re-reads (or, with none asked for, only removes) at its end; a database tuned on by other means
leaves `reread/` stale, so remove it then (`clear_reread`).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import shutil
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from data.labels import mean_latency

__all__ = [
    "REREAD_DIR",
    "ROUNDS",
    "Reread",
    "clear_reread",
    "measure_rounds",
    "reread_best",
    "reread_count",
    "tuned_database",
]

log = logging.getLogger(__name__)

REREAD_DIR = "reread"
"""The re-read records' database, under the run's output dir."""

ROUNDS = 3
"""A re-read's rounds over the candidates (`reread_best`'s default, as a tuning run re-reads)."""


@dataclasses.dataclass
class Reread:
    """One task's re-read: its best valid reading in the database (`reported_s`: the run's final), the
    least median re-read of its re-read records (`reread_s`), and each re-read record's (reading,
    re-read) seconds, best reading first (a best record that no longer builds or runs is not among
    them, and `reported_s` is still its reading)."""

    reported_s: float
    reread_s: float
    candidates: list[tuple[float, float]]

    @property
    def ratio(self) -> float:
        """The re-read final over the reported one (over 1: the run read its best low)."""
        return self.reread_s / self.reported_s


def reread_count(top: int | None, target: Any) -> int:
    """The records a task re-reads: `top` as given (`MeasureConfig.reread_top`); unset, 3 on a GPU
    target (where the cost model shares the device with the runner) and 0 on a CPU."""
    from tvm_env.target import is_gpu

    return (3 if is_gpu(target) else 0) if top is None else top


def clear_reread(work_dir: str | Path) -> None:
    """Remove the re-read database of `work_dir` (none: nothing to do)."""
    shutil.rmtree(Path(work_dir) / REREAD_DIR, ignore_errors=True)


def tuned_database(work_dir: str | Path) -> Any:
    """The database a tuned network compiles with: the re-read records first, where `reread_best` left
    them, then the run's own (`OrderedUnionDatabase`: a task takes the first database that has it)."""
    from bridge.database import RECORDS, WORKLOADS
    from tvm_env import ms

    run = ms.database.JSONDatabase(work_dir=str(work_dir), module_equality="structural")
    reread = Path(work_dir) / REREAD_DIR
    if not (reread / RECORDS).is_file() or not (reread / WORKLOADS).is_file():
        return run
    first = ms.database.JSONDatabase(work_dir=str(reread), module_equality="structural")
    return ms.database.OrderedUnionDatabase(first, run)


def measure_rounds(runner: Any, inputs: Sequence[Any], rounds: int) -> list[list[float]]:
    """Each of `inputs` (MetaSchedule `RunnerInput`s) measured `rounds` times by `runner`, all of them in
    each round, in an order rotated by one each round so that drift in the device falls on all alike:
    their mean latencies in seconds, a list an input, inf for a measurement that failed."""

    readings: list[list[float]] = [[] for _ in inputs]
    order = list(range(len(inputs)))
    for _ in range(rounds if inputs else 0):
        for i, future in zip(order, runner.run([inputs[i] for i in order])):
            try:
                result = future.result()
            except Exception:  # noqa: BLE001 - a runner's worker may raise its own errors: a failed reading
                readings[i].append(math.inf)
                continue
            readings[i].append(mean_latency(None if result.error_msg is not None else result.run_secs))
        order = order[1:] + order[:1]
    return readings


def _picks(database: Any, tasks: Sequence[Any], top: int) -> tuple[list[tuple[str, Any, Any]], dict[str, float]]:
    """((task, record, measure candidate) of each task's `top` best valid records, best first; task ->
    its best valid reading). A record whose trace no longer applies to its task is left out, said in
    the log, and the next one taken."""
    from data.replay import task_records

    picks, best = [], {}
    for task in tasks:
        valid = [(mean_latency(r.run_secs), r) for r in task_records(database, task.mod)]
        valid = [(latency, r) for latency, r in valid if math.isfinite(latency)]
        valid.sort(key=lambda pair: pair[0])
        if valid:
            best[task.name] = valid[0][0]
        taken = 0
        for _, record in valid:
            if taken == top:
                break
            try:
                picks.append((task.name, record, record.as_measure_candidate()))
                taken += 1
            except Exception as err:  # noqa: BLE001 - TVM raises its own errors for a trace that does not apply
                log.warning("%s: a record's trace no longer applies, not re-read: %s", task.name, err)
    return picks, best


def reread_best(
    database: Any,
    tasks: Sequence[Any],
    target: Any,
    *,
    builder: Any,
    runner: Any,
    top: int,
    rounds: int = ROUNDS,
    out: str | Path | None = None,
) -> dict[str, Reread]:
    """Task name -> its `Reread`, for the tasks (anything with a `name` and an IRModule `mod`, e.g.
    `data.zoo.TaskSpec`) with a valid record in `database` (a finite, plausible latency,
    `data.labels.mean_latency`). Each task's `top` best valid records are rebuilt by `builder` and
    measured `rounds` times by `runner` (`measure_rounds`); one that no longer replays, builds or runs
    is left out (a task left with none is left out). Records that compile to the same kernel are not
    told apart. With `out`, the re-read records go to the database `out/reread`, replacing any there.

    Raises:
        ValueError: `top` or `rounds` under 1.
    """
    from data.measure import device_type
    from tvm_env import ms

    if top < 1 or rounds < 1:
        raise ValueError(f"a re-read needs top >= 1 and rounds >= 1, not {top} and {rounds}")
    picks, best = _picks(database, tasks, top)
    built = builder.build([ms.builder.BuilderInput(c.sch.mod, target) for *_, c in picks]) if picks else []
    paths = [b.artifact_path if b.error_msg is None else None for b in built]
    try:
        ok = [i for i, path in enumerate(paths) if path is not None]
        inputs = [ms.runner.RunnerInput(paths[i], device_type(target), picks[i][2].args_info) for i in ok]
        readings = dict(zip(ok, measure_rounds(runner, inputs, rounds)))
    finally:
        for path in paths:
            if path is not None:
                ms.utils.remove_build_dir(path)
    medians = {i: statistics.median(r) for i, r in readings.items() if all(math.isfinite(x) for x in r)}
    out_db = None
    if out is not None:
        clear_reread(out)
        (Path(out) / REREAD_DIR).mkdir(parents=True)
        out_db = ms.database.JSONDatabase(work_dir=str(Path(out) / REREAD_DIR), module_equality="structural")
    found: dict[str, Reread] = {}
    for i, seconds in sorted(medians.items()):
        name, record, _ = picks[i]
        if out_db is not None:
            workload = out_db.commit_workload(record.workload.mod)
            out_db.commit_tuning_record(
                ms.database.TuningRecord(
                    record.trace, workload, [seconds], target=record.target, args_info=record.args_info
                )
            )
        task = found.setdefault(name, Reread(best[name], seconds, []))
        task.reread_s = min(task.reread_s, seconds)
        task.candidates.append((mean_latency(record.run_secs), seconds))
    return found
