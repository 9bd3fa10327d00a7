"""Typed measurement records from MetaSchedule JSON databases and TenSet-style trees.

Two inputs (docs/architecture.md):

* a database folder as written by `tune_tir` / `tune_tasks` / `JSONDatabase`:
  `database_workload.json` + `database_tuning_record.json` (either may be `.json.xz`);
* a TenSet-style tree `ROOT/<device>/<task_dir>/` of such folders with `ROOT/<device>/index.json`
  (task names, FLOPs, networks and weights), as `data.collect` writes it. ROOT or a device folder
  may be given.

The files are parsed here line by line (plain json), not through `JSONDatabase`, so one bad line
never loses the others: malformed lines, unknown workload indices and failed measurements are
skipped (or kept with label 0, by option) and counted with file and line in a `ReadSummary`.
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

from data.labels import mean_latency

__all__ = ["FAILED_POLICIES", "INDEX", "ReadSummary", "Record", "RecordSet", "Task", "Workload", "read_records"]

WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"
INDEX = "index.json"
FAILED_POLICIES = ("drop", "zero")
EXAMPLES_PER_REASON = 3


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

    Reasons: "malformed line", "unknown workload", "failed measurement" (dropped), "failed
    measurement (kept, label 0)", "unreadable file", and the featurizer's "trace no longer applies",
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


def _open_text(path: Path) -> Path | None:
    """`path` or `path.xz`, whichever exists."""
    if path.exists():
        return path
    packed = path.with_name(path.name + ".xz")
    return packed if packed.exists() else None


def _lines(path: Path, summary: ReadSummary) -> Iterator[tuple[int, str]]:
    """(line number, text) of the non-empty lines; a corrupt file is counted after its good lines."""
    opener = lzma.open if path.suffix == ".xz" else open
    lineno = 0
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if line.strip():
                    yield lineno, line
    except (OSError, EOFError, lzma.LZMAError, UnicodeDecodeError) as err:
        summary.add("unreadable file", f"{path}:{lineno + 1}", str(err))


def _read_workloads(path: Path, summary: ReadSummary) -> dict[int, Workload | str]:
    """Workload index (0-based line order, as MetaSchedule numbers them) -> Workload, or the reason
    that line is unusable."""
    out: dict[int, Workload | str] = {}
    for index, (lineno, line) in enumerate(_lines(path, summary)):
        where = f"{path}:{lineno}"
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
        if not isinstance(run_secs, list) or not all(isinstance(s, (int, float)) for s in run_secs):
            raise TypeError(f"run_secs {run_secs!r} is not a list of numbers")
        run_secs = tuple(float(s) for s in run_secs)
    target = body[2] if len(body) > 2 else None
    args_info = body[3] if len(body) > 3 else None
    if target is not None and not isinstance(target, dict):
        raise TypeError("target is not a JSON object")
    return wl_index, trace, run_secs, target, args_info


def _read_database(
    folder: Path, key_of: Any, failed: str, summary: ReadSummary, tasks: dict[str, Task], make_task: Any
) -> None:
    """Read one database folder; `key_of(workload, target)` names each record's task, `make_task(key,
    record)` creates a Task the first time a key is seen."""
    wl_path = _open_text(folder / WORKLOAD_FILE)
    rec_path = _open_text(folder / RECORD_FILE)
    if rec_path is None:
        summary.add("unreadable file", str(folder / RECORD_FILE), "no database_tuning_record.json[.xz]")
        return
    summary.files += 1
    workloads = _read_workloads(wl_path, summary) if wl_path else {}
    for lineno, line in _lines(rec_path, summary):
        summary.lines += 1
        where = f"{rec_path}:{lineno}"
        try:
            wl_index, trace, run_secs, target, args_info = _parse_record(line)
        except (ValueError, TypeError) as err:
            summary.add("malformed line", where, str(err))
            continue
        workload = workloads.get(wl_index)
        if not isinstance(workload, Workload):
            detail = workload or f"workload index {wl_index} not in {wl_path or folder / WORKLOAD_FILE}"
            summary.add("unknown workload", where, detail)
            continue
        latency = mean_latency(run_secs)
        if not math.isfinite(latency):
            if failed == "drop":
                summary.add("failed measurement", where, f"run_secs={list(run_secs) if run_secs else run_secs}")
                continue
            summary.add("failed measurement (kept, label 0)", where)
        key = key_of(workload, target)
        record = Record(key, workload, trace, run_secs, latency, target, args_info, where)
        task = tasks.get(key)
        if task is None:
            task = tasks[key] = make_task(key, record)
        task.records.append(record)
        summary.kept += 1


def _task_dir(name: str, shash: str) -> str:
    """`<name>_<8 hex digits of the structural hash>` (data.zoo's task folder naming); a folder
    already named that way keeps its name."""
    try:
        suffix = f"_{int(shash) & 0xFFFFFFFF:08x}"
    except ValueError:
        suffix = f"_{shash[:8]}"
    return name if name.endswith(suffix) else name + suffix


def _device_of(target: dict | None) -> str:
    if target is None:
        return "unknown-device"
    from tvm_env import (  # TVM only for bare databases
        parse_target,
        target_device_name,
    )

    return target_device_name(parse_target(target))


def _is_database(folder: Path) -> bool:
    return _open_text(folder / RECORD_FILE) is not None


def _read_tree_device(device_dir: Path, failed: str, summary: ReadSummary, tasks: dict[str, Task]) -> None:
    index_path = device_dir / INDEX
    index: dict = {}
    if index_path.exists():
        try:
            index = json.loads(index_path.read_text())
        except json.JSONDecodeError as err:
            summary.add("unreadable file", str(index_path), f"not valid JSON ({err}); task names/networks unknown")
    weights: dict[str, dict[str, float]] = {}
    for net, rows in (index.get("networks") or {}).items():
        for task_dir, weight in rows:
            weights.setdefault(task_dir, {})[net] = float(weight)
    for task_folder in sorted(p for p in device_dir.iterdir() if p.is_dir() and _is_database(p)):
        meta = (index.get("tasks") or {}).get(task_folder.name, {})
        key = f"{device_dir.name}/{task_folder.name}"

        def make(key: str, record: Record, meta=meta, task_dir=task_folder.name) -> Task:
            name = meta.get("name") or task_dir.rsplit("_", 1)[0]
            nets = dict(weights.get(task_dir, {}))
            nets.update({n: nets.get(n, 1.0) for n in meta.get("networks", [])})
            return Task(key, name, nets, float(meta.get("flops") or 0.0), index.get("target") or record.target)

        _read_database(task_folder, lambda wl, target, key=key: key, failed, summary, tasks, make)


def _read_bare_database(folder: Path, failed: str, summary: ReadSummary, tasks: dict[str, Task]) -> None:
    """A tune_tir / tune_tasks work_dir: each workload is a task named after the folder."""
    devices: dict[str, str] = {}

    def key_of(workload: Workload, target: dict | None) -> str:
        text = json.dumps(target, sort_keys=True)
        if text not in devices:
            devices[text] = _device_of(target)
        return f"{devices[text]}/{_task_dir(folder.name, workload.shash)}"

    def make(key: str, record: Record) -> Task:
        name = key.split("/", 1)[1]
        return Task(key, name.rsplit("_", 1)[0], {}, 0.0, record.target)

    _read_database(folder, key_of, failed, summary, tasks, make)


def read_records(
    paths: Iterable[str | Path], *, failed: Literal["drop", "zero"] = "zero", summary: ReadSummary | None = None
) -> RecordSet:
    """Read records from database folders and TenSet-style trees (ROOT or ROOT/<device>).

    Args:
        paths: database folders, device folders (with index.json or task subfolders) or tree roots.
        failed: "drop" skips failed measurements; "zero" keeps them (label 0). Counted either way.
        summary: a summary to add to (a new one by default).

    Returns:
        Tasks by key (in the order found) and the read summary.

    Raises:
        ValueError: for an unknown `failed` policy or a path that holds no records at all.
    """
    if failed not in FAILED_POLICIES:
        raise ValueError(f"failed={failed!r}: expected one of {FAILED_POLICIES}")
    summary = summary if summary is not None else ReadSummary()
    tasks: dict[str, Task] = {}
    for path in map(Path, paths):
        if not path.is_dir():
            raise ValueError(f"{path}: not a folder of MetaSchedule records")
        if _is_database(path):
            _read_bare_database(path, failed, summary, tasks)
            continue
        subdirs = sorted(p for p in path.iterdir() if p.is_dir())
        if (path / INDEX).exists() or any(_is_database(p) for p in subdirs):
            _read_tree_device(path, failed, summary, tasks)
            continue
        devices = [
            p for p in subdirs if (p / INDEX).exists() or any(_is_database(q) for q in p.iterdir() if q.is_dir())
        ]
        if not devices:
            raise ValueError(
                f"{path}: no {RECORD_FILE}[.xz] here, in its subfolders (a device folder) or two levels down (a tree root)"
            )
        for device_dir in devices:
            _read_tree_device(device_dir, failed, summary, tasks)
    return RecordSet(tasks, summary)
