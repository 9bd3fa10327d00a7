"""Which lines of a MetaSchedule JSON database load, each named by file and line.

TVM's `JSONDatabase` loads every line at once, replaying each record's trace on its workload, and on a
bad line raises an error that names neither file nor line (a torn last line after a kill, a record
stored by another TVM version whose trace no longer applies: "parallel_for_dynamic error"). `check`
loads the lines one by one as TVM would: a workload line must parse (JSON, then `Workload.from_json`);
a record line must parse (JSON, a readable workload's index, then `TuningRecord.from_json` against that
workload); and no line may be empty or blank (TVM 0.27 keeps such a line, then dereferences its null:
the process dies of a segfault, so `load` looks for one before it asks TVM). Two callers load with
`load` and check only when it fails: `bridge.database` (a tuning run's resume skips the bad lines and
rewrites the files) and `data.collect` (a collected task's first bad line is an error, its files left
as they are).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from tvm_env import ms

__all__ = ["CheckedDatabase", "check", "has_blank_line", "load"]


@dataclasses.dataclass
class CheckedDatabase:
    """The lines of a database's two files that load, and one `file:line: reason` for each that does not.

    Attributes:
        workloads: (line text, Workload) of each workload line that loads, in order.
        records: each record line that loads, its workload index renumbered to `workloads`.
        problems: one "<file>:<line>: unreadable workload|tuning record (<error>)" a bad line.
    """

    workloads: list[tuple[str, Any]]
    records: list[str]
    problems: list[str]


def _raw_lines(path: Path) -> list[bytes]:
    """A file's lines as bytes, the empty ones too (none where it does not exist)."""
    lines = path.read_bytes().split(b"\n") if path.exists() else []
    if lines and lines[-1] == b"":
        lines.pop()  # after the last newline: not a line
    return lines


def _lines(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of the lines (the empty ones too); undecodable bytes cost their line only."""
    return [(i, line.decode("utf-8", errors="replace")) for i, line in enumerate(_raw_lines(path), start=1)]


def has_blank_line(path: str | Path) -> bool:
    """Whether a database file has an empty or blank line, which TVM's load cannot survive."""
    return any(not line.strip() for line in _raw_lines(Path(path)))


def load(workload_path: str | Path, record_path: str | Path, **options: Any) -> tuple[Any, str]:
    """(TVM's `JSONDatabase` of the two files, "") when it loads; (None, why) when it does not: "an
    empty line" (looked for first: on one, TVM's load dies of a segfault) or TVM's error, which names
    no line (`check` finds them). `options` go to `JSONDatabase` (e.g. module_equality)."""
    if has_blank_line(workload_path) or has_blank_line(record_path):
        return None, "an empty line"
    try:
        return ms.database.JSONDatabase(str(workload_path), str(record_path), **options), ""
    except Exception as err:  # noqa: BLE001 - TVM's parallel loader raises a bare error ("parallel_for_dynamic error")
        return None, _why(err)


def _why(err: Exception) -> str:
    text = str(err).strip()
    if text == "(not rendered)":  # TVM's ScheduleError of a trace that does not apply to its workload
        text = "its trace does not apply"
    return f"{type(err).__name__}: {text.splitlines()[-1][:120]}" if text else type(err).__name__


def check(workload_path: str | Path, record_path: str | Path) -> CheckedDatabase:
    """Load each line of a database's workload and record files as `JSONDatabase` would (module docstring)."""
    wpath, rpath = Path(workload_path), Path(record_path)
    problems: list[str] = []
    workloads: list[tuple[str, Any]] = []
    index_map: dict[int, int] = {}  # old workload index -> new index
    old = 0  # a workload's index as records name it: its place among the non-empty lines
    for lineno, text in _lines(wpath):
        if not text.strip():  # TVM 0.27 keeps an empty line and dereferences its null (a segfault)
            problems.append(f"{wpath}:{lineno}: empty line")
            continue
        old += 1
        try:
            workload = ms.database.Workload.from_json(json.loads(text))
        except Exception as err:  # noqa: BLE001 - any parse failure (JSON, TVM) makes the line unusable
            problems.append(f"{wpath}:{lineno}: unreadable workload ({_why(err)})")
            continue
        index_map[old - 1] = len(workloads)
        workloads.append((text, workload))
    records: list[str] = []
    for lineno, text in _lines(rpath):
        if not text.strip():
            problems.append(f"{rpath}:{lineno}: empty line")
            continue
        try:
            index, body = json.loads(text)
            if isinstance(index, bool) or not isinstance(index, int) or index not in index_map:
                raise ValueError(f"workload index {index!r} names no readable workload")
            ms.database.TuningRecord.from_json(body, workloads[index_map[index]][1])
        except Exception as err:  # noqa: BLE001 - any parse failure (JSON, TVM) makes the line unusable
            problems.append(f"{rpath}:{lineno}: unreadable tuning record ({_why(err)})")
            continue
        new = index_map[index]
        records.append(text if new == index else json.dumps([new, body], separators=(",", ":")))
    return CheckedDatabase(workloads, records, problems)
