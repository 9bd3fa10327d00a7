"""Each task's best schedules measured again once the search has stopped: finals read with the device quiet.

While a run searches, our cost models score and train on the GPU the runner measures on, in short
bursts between batches. On an H200 another process that keeps the GPU busy a tenth of the time
lowers the time between two kernels launched back to back by about 0.18 us (0.90 to 0.73 us in a CUDA
graph of an empty kernel; a process that only holds its CUDA context changes nothing):
docs/benchmarks.md, "The graph timer's low readings: another process's bursts on the GPU". A run
that reads a kernel of 2-4 us over a thousand times then keeps a best reading 5-8% under the same
kernel read alone, and on 10-15 us kernels 1-2%; with the cost model on the CPU
(`--model-device cpu`) the runs' bests read within 0.4% of the kernel alone.

`reread_best` measures each task's `top` best records again after the search, with the run's own
builder and runner (so with its timer and settings), `rounds` times each, the candidates interleaved
round by round; a candidate's re-read is the median of its rounds. It writes the re-read records
(their traces, with the median as their one `run_secs`) to a database of their own, `reread/` in the
output dir, and `tuned_database` puts that one first: the network's compile then takes each task's
best re-read schedule, not the best reading of the run. A run that tunes again removes the old
re-read first (`clear_reread`), since the run's database may then hold better schedules.
"""

from __future__ import annotations

import dataclasses
import shutil
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["REREAD_DIR", "ROUNDS", "Reread", "clear_reread", "reread_best", "reread_count", "tuned_database"]

REREAD_DIR = "reread"
"""The re-read records' database, under the run's output dir."""

ROUNDS = 3
"""A re-read's rounds over the candidates (`reread_best`'s default, as a tuning run re-reads)."""


@dataclasses.dataclass
class Reread:
    """One task's re-read: the run's best reading (`reported_s`), the best median re-read of its
    `top` best records (`reread_s`), and each record's (reported, re-read) seconds, best reported first."""

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
    """Task name -> its `Reread`, for the tasks (`data.zoo.TaskSpec`) that have a valid record in
    `database`. Each task's `top` best records are rebuilt by `builder` and measured `rounds` times by
    `runner`; a record that no longer builds or runs is left out (a task left with none is left out).
    With `out`, the re-read records go to the database `out/reread`, replacing any there.

    Raises:
        ValueError: `top` or `rounds` under 1.
    """
    from data.labels import mean_latency
    from data.measure import device_type
    from tvm_env import ms

    if top < 1 or rounds < 1:
        raise ValueError(f"a re-read needs top >= 1 and rounds >= 1, not {top} and {rounds}")
    picks: list[tuple[str, Any, Any]] = []  # (task, record, measure candidate)
    for task in tasks:
        if not database.has_workload(task.mod):
            continue
        workload = database.commit_workload(task.mod)
        for record in database.get_top_k(workload, top):
            picks.append((task.name, record, record.as_measure_candidate()))
    built = builder.build([ms.builder.BuilderInput(c.sch.mod, target) for *_, c in picks]) if picks else []
    paths = [b.artifact_path if b.error_msg is None else None for b in built]
    try:
        ok = [i for i, path in enumerate(paths) if path is not None]
        inputs = {i: ms.runner.RunnerInput(paths[i], device_type(target), picks[i][2].args_info) for i in ok}
        readings: dict[int, list[float]] = {i: [] for i in ok}
        order = list(ok)
        for _ in range(rounds):
            for i, future in zip(order, runner.run([inputs[i] for i in order])):
                result = future.result()
                latency = mean_latency(None if result.error_msg is not None else result.run_secs)
                readings[i].append(latency)
            order = order[1:] + order[:1]  # drift in the device falls on every candidate alike
    finally:
        for path in paths:
            if path is not None:
                ms.utils.remove_build_dir(path)
    medians = {i: statistics.median(r) for i, r in readings.items() if all(x != float("inf") for x in r)}
    out_db = None
    if out is not None:
        clear_reread(out)
        (Path(out) / REREAD_DIR).mkdir(parents=True)
        out_db = ms.database.JSONDatabase(work_dir=str(Path(out) / REREAD_DIR), module_equality="structural")
    found: dict[str, Reread] = {}
    for i, seconds in medians.items():
        name, record, _ = picks[i]
        reported = mean_latency([float(s) for s in record.run_secs])
        if out_db is not None:
            workload = out_db.commit_workload(record.workload.mod)
            out_db.commit_tuning_record(
                ms.database.TuningRecord(
                    record.trace, workload, [seconds], target=record.target, args_info=record.args_info
                )
            )
        task = found.setdefault(name, Reread(reported, seconds, []))
        task.reported_s, task.reread_s = min(task.reported_s, reported), min(task.reread_s, seconds)
        task.candidates.append((reported, seconds))
    for task in found.values():
        task.candidates.sort()
    return found
