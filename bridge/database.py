"""Open a tuning output dir's MetaSchedule database, skipping torn or corrupt lines instead of failing.

A crash (`kill -9`, power loss) during tuning can leave a torn last line in
database_tuning_record.json; TVM's `JSONDatabase` then refuses the whole dir with an error that
names neither file nor line, and the run cannot resume. `open_database` loads the database as TVM
does (after a byte scan for empty lines, on which TVM's load dies of a segfault); only when that fails
does it check every line (serially: on a resume of 1,448 records the check took 5.6-6.3 s on a 2-core
host, TVM's load 3.6-4.1 s, so it no longer runs on a sound database; docs/benchmarks.md, "Opening the
database first"). TVM's parser ignores data after a line's JSON, which the check refuses: a line of
two records run together loads as its first (not a line TVM's writer makes):

1. each line must load as TVM would load it (`data.database_check.check`: a workload line through
   `Workload.from_json`, a record line through `TuningRecord.from_json` against its workload), and
   none may be empty;
2. a bad line is skipped and reported as `file:line: reason`; records of a skipped workload go
   with it, and later records' workload indices are renumbered to match;
3. when anything was skipped, the original file is kept as `<name>.corrupt-<n>` (never overwritten)
   and the cleaned file replaces it atomically, so the database opens and the run resumes.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from data.atomic import atomic_write_text
from data.database_check import check, load

__all__ = ["RECORDS", "WORKLOADS", "open_database", "repair_database"]

log = logging.getLogger(__name__)

WORKLOADS, RECORDS = "database_workload.json", "database_tuning_record.json"


def _keep_copy(path: Path) -> Path:
    n = 0
    while (copy := path.with_name(f"{path.name}.corrupt-{n}")).exists():
        n += 1
    copy.write_bytes(path.read_bytes())
    return copy


def repair_database(work_dir: str | os.PathLike) -> list[str]:
    """Check both database files of `work_dir` and rewrite them without bad lines.

    Returns:
        One `file:line: reason` string per skipped line (empty: the files were fine, nothing written).
    """
    work_dir = Path(work_dir)
    wpath, rpath = work_dir / WORKLOADS, work_dir / RECORDS
    checked = check(wpath, rpath)
    problems, workloads, records = checked.problems, checked.workloads, checked.records
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
    paths = (Path(work_dir) / WORKLOADS, Path(work_dir) / RECORDS)
    database, _ = load(*paths, module_equality="structural")  # a sound database: no line-by-line check (serial)
    if database is not None:
        return database, []
    problems = repair_database(work_dir)
    database, why = load(*paths, module_equality="structural")
    if database is None:
        raise ValueError(f"{work_dir}: the tuning database does not open ({why})")
    return database, problems
