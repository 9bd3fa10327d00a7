"""Open a tuning output dir's MetaSchedule database, skipping torn or corrupt lines instead of failing.

A crash (`kill -9`, power loss) during tuning can leave a torn last line in
database_tuning_record.json; TVM's `JSONDatabase` then refuses the whole dir with an error that
names neither file nor line, and the run cannot resume. `open_database` checks every line first:

1. each workload line must parse (JSON, then `Workload.from_json`); each record line must parse
   (JSON, a known workload index, then `TuningRecord.from_json` against its workload);
2. a bad line is skipped and reported as `file:line: reason`; records of a skipped workload go
   with it, and later records' workload indices are renumbered to match;
3. when anything was skipped, the original file is kept as `<name>.corrupt-<n>` (never overwritten)
   and the cleaned file replaces it atomically, so the database opens and the run resumes.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from data.atomic import atomic_write_text
from tvm_env import ms

__all__ = ["RECORDS", "WORKLOADS", "open_database", "repair_database"]

log = logging.getLogger(__name__)

WORKLOADS, RECORDS = "database_workload.json", "database_tuning_record.json"


def _keep_copy(path: Path) -> Path:
    n = 0
    while (copy := path.with_name(f"{path.name}.corrupt-{n}")).exists():
        n += 1
    copy.write_bytes(path.read_bytes())
    return copy


def _lines(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of the non-empty lines; undecodable bytes cost their line only."""
    if not path.exists():
        return []
    text = path.read_bytes().decode("utf-8", errors="replace")
    return [(i, line) for i, line in enumerate(text.split("\n"), start=1) if line.strip()]


def repair_database(work_dir: str | os.PathLike) -> list[str]:
    """Check both database files of `work_dir` and rewrite them without bad lines.

    Returns:
        One `file:line: reason` string per skipped line (empty: the files were fine, nothing written).
    """
    work_dir = Path(work_dir)
    problems: list[str] = []
    workloads: list[tuple[str, Any]] = []  # (text, Workload) of good lines
    index_map: dict[int, int] = {}  # old workload index -> new index
    wpath, rpath = work_dir / WORKLOADS, work_dir / RECORDS
    for old, (lineno, text) in enumerate(_lines(wpath)):
        try:
            workload = ms.database.Workload.from_json(json.loads(text))
        except Exception as err:  # any parse failure (JSON, TVM) makes the line unusable
            problems.append(f"{wpath}:{lineno}: unreadable workload ({type(err).__name__}: {str(err)[:120]})")
            continue
        index_map[old] = len(workloads)
        workloads.append((text, workload))
    records: list[str] = []
    for lineno, text in _lines(rpath):
        try:
            index, body = json.loads(text)
            if not isinstance(index, int) or index not in index_map:
                raise ValueError(f"workload index {index!r} names no readable workload")
            ms.database.TuningRecord.from_json(body, workloads[index_map[index]][1])
        except Exception as err:  # any parse failure (JSON, TVM) makes the line unusable
            problems.append(f"{rpath}:{lineno}: unreadable tuning record ({type(err).__name__}: {str(err)[:120]})")
            continue
        new = index_map[index]
        records.append(text if new == index else json.dumps([new, body], separators=(",", ":")))
    if not problems:
        return []
    bad_workloads = any(p.startswith(f"{wpath}:") for p in problems)  # record indices were renumbered
    for path, lines in ((wpath, [t for t, _ in workloads]), (rpath, records)):
        if path.exists() and (any(p.startswith(f"{path}:") for p in problems) or (path == rpath and bad_workloads)):
            copy = _keep_copy(path)
            atomic_write_text(path, "".join(f"{line}\n" for line in lines))
            log.warning("kept the original %s as %s", path, copy)
    for problem in problems:
        log.warning("skipped %s", problem)
    return problems


def open_database(work_dir: str | os.PathLike) -> tuple[Any, list[str]]:
    """(JSONDatabase of `work_dir` with structural module equality, skipped lines as `file:line: reason`).

    Raises:
        ValueError: the database still does not open after the repair (names the dir).
    """
    problems = repair_database(work_dir)
    try:
        database = ms.database.JSONDatabase(work_dir=str(work_dir), module_equality="structural")
    except Exception as err:  # TVM's parallel loader raises a bare RuntimeError
        raise ValueError(f"{work_dir}: the tuning database does not open ({type(err).__name__}: {err})") from None
    return database, problems
