"""Typed measurement records from MetaSchedule JSON databases and TenSet-style trees.

Two inputs (docs/architecture.md):

* a database folder as written by `tune_tir` / `tune_tasks` / `JSONDatabase`:
  `database_workload.json` + `database_tuning_record.json` (either may be `.json.xz`);
* a TenSet-style tree `ROOT/<device>/<task_dir>/` of such folders with `ROOT/<device>/index.json`
  (task names, FLOPs, networks and weights), as `data.collect` writes it. ROOT or a device folder
  may be given. The layout and the index format live in `data.record_tree`.

A database folder (a tuning work dir) may hold an index.json of the same format
(`data.record_tree.index_tasks`), which gives its workloads their task names and networks; without
one, `network=` names the network its records belong to.

The files are parsed here line by line (plain json), not through `JSONDatabase`, so one bad line
never loses the others: malformed lines (a byte that is not UTF-8 included), unknown workload
indices, implausible latencies (`data.labels.latency_problem`), duplicates of a record already read
and failed measurements are skipped (failed ones kept with label 0, by option) and counted with file
and line in a `ReadSummary`; an index.json that cannot be used is counted as an unreadable file.
Traces that no longer apply are only found at replay time; the featurizer counts them in the same
summary. Nothing here imports TVM except the device naming of a bare database folder.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import lzma
import math
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

from data.labels import latency_problem, mean_latency
from data.record_tree import (
    INDEX,
    RECORD_FILE,
    WORKLOAD_FILE,
    IndexFileError,
    database_file,
    device_dirs,
    index_weights,
    read_index,
    read_lines,
    task_dir,
    task_dirs,
    task_key,
    task_name,
)

__all__ = ["FAILED_POLICIES", "ReadSummary", "Record", "RecordSet", "Task", "Workload", "read_records"]

FAILED_POLICIES = ("drop", "zero")
EXAMPLES_PER_REASON = 3
MALFORMED = "malformed line"
UNKNOWN_WORKLOAD = "unknown workload"
FAILED = "failed measurement"
FAILED_KEPT = "failed measurement (kept, label 0)"
IMPLAUSIBLE = "implausible latency"
DUPLICATE = "duplicate record"
UNREADABLE = "unreadable file"


@dataclasses.dataclass(frozen=True)
class Workload:
    """One line of database_workload.json: the unscheduled module, still serialized.

    `json_b64` is MetaSchedule's base64 of the IRModule's JSON graph; `data.featurize` turns it back
    into a module (`ms.database.Workload.from_json`).
    """

    shash: str
    json_b64: str
    source: str

    def as_json(self) -> list[str]:
        """The database line, as `ms.database.Workload.from_json` takes it."""
        return [self.shash, self.json_b64]


@dataclasses.dataclass(frozen=True)
class Record:
    """One measured schedule.

    trace: MetaSchedule trace JSON `[instructions, decisions]`.
    run_secs: per-repeat seconds as stored (None when the line had none).
    latency: `data.labels.mean_latency(run_secs)`, inf for a failed measurement.
    target: the record's target JSON (None when absent); args_info: argument info JSON.
    source: "<file>:<line>" (1-based) of the tuning-record line.
    """

    task_key: str
    workload: Workload
    trace: list
    run_secs: tuple[float, ...] | None
    latency: float
    target: dict | None
    args_info: list | None
    source: str

    @property
    def valid(self) -> bool:
        return math.isfinite(self.latency)


@dataclasses.dataclass
class Task:
    """The records of one task (one workload on one device) and what the index says about it.

    key: "<device>/<task_dir>". weight: the largest weight over `network_weights` (1 for single
    operators). flops: from index.json, 0 when unknown.
    """

    key: str
    name: str
    network_weights: dict[str, float]
    flops: float
    target: dict | None
    records: list[Record] = dataclasses.field(default_factory=list)

    @property
    def networks(self) -> tuple[str, ...]:
        return tuple(sorted(self.network_weights))

    @property
    def weight(self) -> float:
        return max(self.network_weights.values(), default=1.0)


@dataclasses.dataclass
class ReadSummary:
    """Counts of what was read, kept and skipped, with up to 3 "file:line: detail" examples per reason.

    Reasons: "malformed line", "unknown workload", "implausible latency", "duplicate record",
    "failed measurement" (dropped), "failed measurement (kept, label 0)", "unreadable file", and the
    featurizer's "trace no longer applies",
    "lowering failed", "unknown workload" (a workload that does not decode) and "unusable target".
    """

    files: int = 0
    lines: int = 0
    kept: int = 0
    counts: Counter = dataclasses.field(default_factory=Counter)
    examples: dict[str, list[str]] = dataclasses.field(default_factory=dict)

    def add(self, reason: str, where: str, detail: str = "") -> None:
        self.counts[reason] += 1
        ex = self.examples.setdefault(reason, [])
        if len(ex) < EXAMPLES_PER_REASON:
            ex.append(f"{where}: {detail}" if detail else where)

    def merge(self, other: ReadSummary) -> None:
        self.files += other.files
        self.lines += other.lines
        self.kept += other.kept
        for reason, n in other.counts.items():
            self.counts[reason] += n
            ex = self.examples.setdefault(reason, [])
            ex += other.examples.get(reason, [])[: EXAMPLES_PER_REASON - len(ex)]

    def skipped(self) -> int:
        return sum(n for reason, n in self.counts.items() if "kept" not in reason)

    def format(self) -> str:
        out = [f"records: {self.lines} lines in {self.files} files, {self.kept} kept, {self.skipped()} skipped"]
        for reason in sorted(self.counts):
            out.append(f"  {reason}: {self.counts[reason]}")
            out += [f"    e.g. {ex}" for ex in self.examples.get(reason, [])]
        return "\n".join(out)


@dataclasses.dataclass
class RecordSet:
    tasks: dict[str, Task]
    summary: ReadSummary


def _lines(path: Path, summary: ReadSummary) -> Iterator[tuple[int, str | None]]:
    """(line number, text) of the non-empty lines; a line that is not UTF-8 comes back as None after
    it is counted as malformed (it costs that line only); a torn file is counted after its good lines."""
    lineno = 0
    try:
        for lineno, text in read_lines(path):
            if isinstance(text, UnicodeDecodeError):
                summary.add(MALFORMED, f"{path}:{lineno}", f"not UTF-8 text (byte {text.object[text.start]:#04x})")
                yield lineno, None
                continue
            yield lineno, text
    except (OSError, EOFError, lzma.LZMAError) as err:
        summary.add(UNREADABLE, f"{path}:{lineno + 1}", f"{type(err).__name__}: {err}; the lines before it are read")


def _read_workloads(path: Path, summary: ReadSummary) -> dict[int, Workload | str]:
    """Workload index (0-based line order, as MetaSchedule numbers them) -> Workload, or the reason
    that line is unusable."""
    out: dict[int, Workload | str] = {}
    for index, (lineno, line) in enumerate(_lines(path, summary)):
        where = f"{path}:{lineno}"
        if line is None:
            out[index] = f"workload line {where} is not UTF-8 text"
            continue
        try:
            shash, b64 = json.loads(line)
            if not isinstance(shash, str) or not isinstance(b64, str):
                raise TypeError("expected [structural hash, base64 module]")
            base64.b64decode(b64, validate=True)
        except (ValueError, TypeError) as err:
            out[index] = f"workload line {where} is malformed ({err})"
            continue
        out[index] = Workload(shash, b64, where)
    return out


def _parse_record(line: str) -> tuple[int, list, tuple[float, ...] | None, dict | None, list | None]:
    """[workload_index, [trace, run_secs, target, args_info]] -> its parts; raises on bad structure."""
    wl_index, body = json.loads(line)
    if not isinstance(wl_index, int) or isinstance(wl_index, bool):
        raise TypeError(f"workload index {wl_index!r} is not an int")
    if not isinstance(body, list) or not body:
        raise TypeError("record body is not a non-empty list")
    trace = body[0]
    if not (isinstance(trace, list) and len(trace) == 2 and all(isinstance(t, list) for t in trace)):
        raise TypeError("trace is not [instructions, decisions]")
    run_secs = body[1] if len(body) > 1 else None
    if run_secs is not None:
        if not isinstance(run_secs, list) or not all(
            isinstance(s, (int, float)) and not isinstance(s, bool) for s in run_secs
        ):
            raise TypeError(f"run_secs {run_secs!r} is not a list of numbers")
        run_secs = tuple(float(s) for s in run_secs)
    target = body[2] if len(body) > 2 else None
    args_info = body[3] if len(body) > 3 else None
    if target is not None and not isinstance(target, dict):
        raise TypeError("target is not a JSON object")
    return wl_index, trace, run_secs, target, args_info


@dataclasses.dataclass
class _Reader:
    """State shared by every database folder of one `read_records` call.

    seen: (task key, workload hash, trace JSON) -> "file:line" of the record kept, so the same
    measured schedule read twice (a tree given as ROOT and as ROOT/<device>, a copied line) is kept
    once and the copy counted as a duplicate.
    """

    failed: str
    summary: ReadSummary
    tasks: dict[str, Task] = dataclasses.field(default_factory=dict)
    seen: dict[tuple[str, str, str], str] = dataclasses.field(default_factory=dict)

    def database(self, folder: Path, key_of: Any, make_task: Any) -> None:
        """Read one database folder; `key_of(workload, target)` names each record's task,
        `make_task(key, record)` creates a Task the first time a key is seen."""
        summary = self.summary
        wl_path = database_file(folder, WORKLOAD_FILE)
        rec_path = database_file(folder, RECORD_FILE)
        if rec_path is None:
            summary.add(UNREADABLE, str(folder / RECORD_FILE), "no database_tuning_record.json[.xz]")
            return
        summary.files += 1
        workloads = _read_workloads(wl_path, summary) if wl_path else {}
        for lineno, line in _lines(rec_path, summary):
            summary.lines += 1
            if line is None:
                continue
            where = f"{rec_path}:{lineno}"
            try:
                wl_index, trace, run_secs, target, args_info = _parse_record(line)
            except (ValueError, TypeError) as err:
                summary.add(MALFORMED, where, str(err))
                continue
            workload = workloads.get(wl_index)
            if not isinstance(workload, Workload):
                detail = workload or f"workload index {wl_index} not in {wl_path or folder / WORKLOAD_FILE}"
                summary.add(UNKNOWN_WORKLOAD, where, detail)
                continue
            problem = latency_problem(run_secs)
            if problem is not None and problem != "failed":
                summary.add(IMPLAUSIBLE, where, problem.removeprefix("implausible: "))
                continue
            if problem == "failed":
                if self.failed == "drop":
                    summary.add(FAILED, where, f"run_secs={list(run_secs) if run_secs else run_secs}")
                    continue
                summary.add(FAILED_KEPT, where)
            key = key_of(workload, target)
            seen_key = (key, workload.shash, json.dumps(trace, sort_keys=True))
            if seen_key in self.seen:
                summary.add(DUPLICATE, where, f"same task, workload and trace as {self.seen[seen_key]}; kept once")
                continue
            self.seen[seen_key] = where
            record = Record(key, workload, trace, run_secs, mean_latency(run_secs), target, args_info, where)
            task = self.tasks.get(key)
            if task is None:
                task = self.tasks[key] = make_task(key, record)
            task.records.append(record)
            summary.kept += 1

    def index(self, folder: Path) -> dict:
        """The folder's index.json ({} when absent); an unusable one is counted and ignored."""
        try:
            return read_index(folder) or {}
        except IndexFileError as err:
            self.summary.add(UNREADABLE, str(folder / INDEX), f"{err}; task names and networks unknown")
            return {}

    def tree_device(self, device_dir: Path) -> None:
        index = self.index(device_dir)
        weights = index_weights(index)
        for folder in task_dirs(device_dir):
            meta = index.get("tasks", {}).get(folder.name, {})
            key = task_key(device_dir.name, folder.name)

            def make(key: str, record: Record, meta=meta, name=folder.name) -> Task:
                return Task(
                    key,
                    meta.get("name") or task_name(name),
                    dict(weights.get(name, {})),
                    float(meta.get("flops") or 0.0),
                    index.get("target") or record.target,
                )

            self.database(folder, lambda wl, target, key=key: key, make)

    def work_dir(self, folder: Path, network: str | None) -> None:
        """A tune_tir / tune_tasks / tune_relax work dir. With an index.json beside the database
        (`data.record_tree.index_tasks`), a workload listed there keeps its task name, folder and
        networks; any other is a task named after the folder. `network` adds every task to it."""
        index = self.index(folder)
        weights = index_weights(index)
        by_hash = {meta.get("workload_hash"): name for name, meta in index.get("tasks", {}).items()}
        devices: dict[str, str] = {}

        def key_of(workload: Workload, target: dict | None) -> str:
            target = index.get("target") or target
            text = json.dumps(target, sort_keys=True)
            if text not in devices:
                devices[text] = _device_of(target)
            return task_key(devices[text], by_hash.get(workload.shash) or task_dir(folder.name, workload.shash))

        def make(key: str, record: Record) -> Task:
            name = key.split("/", 1)[1]
            meta = index.get("tasks", {}).get(name, {})
            nets = dict(weights.get(name, {}))
            if network:
                nets.setdefault(network, 1.0)
            target = index.get("target") or record.target
            return Task(key, meta.get("name") or task_name(name), nets, float(meta.get("flops") or 0.0), target)

        self.database(folder, key_of, make)


def _device_of(target: dict | None) -> str:
    if target is None:
        return "unknown-device"
    from tvm_env import (  # TVM only for bare databases
        parse_target,
        target_device_name,
    )

    return target_device_name(parse_target(target))


def read_records(
    paths: Iterable[str | Path],
    *,
    failed: Literal["drop", "zero"] = "zero",
    summary: ReadSummary | None = None,
    network: str | None = None,
) -> RecordSet:
    """Read records from database folders and TenSet-style trees (ROOT or ROOT/<device>).

    Args:
        paths: database folders, device folders (with index.json or task subfolders) or tree roots.
        failed: "drop" skips failed measurements; "zero" keeps them (label 0). Counted either way.
        summary: a summary to add to (a new one by default).
        network: the network the records of bare databases (tuning work dirs) belong to, so a
            hold-out-by-network split can use them; trees keep their index's networks.

    Returns:
        Tasks by key (in the order found) and the read summary. The same (task, workload, trace)
        read twice is kept once and counted as "duplicate record".

    Raises:
        ValueError: for an unknown `failed` policy or a path that holds no records at all.
    """
    if failed not in FAILED_POLICIES:
        raise ValueError(f"failed={failed!r}: expected one of {FAILED_POLICIES}")
    reader = _Reader(failed, summary if summary is not None else ReadSummary())
    for path in map(Path, paths):
        kind, folders = device_dirs(path)
        for folder in folders:
            if kind == "database":
                reader.work_dir(folder, network)
            else:
                reader.tree_device(folder)
    return RecordSet(reader.tasks, reader.summary)
