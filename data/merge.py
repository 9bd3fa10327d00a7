"""Merge one record tree into another: what a device call collected into a fresh folder joins the
shipped dataset, without losing or duplicating a record.

    python -m data.merge runs/h100_collect data/h100            # every device folder of SRC
    python -m data.merge runs/h100_collect/cuda-sm_90a data/h100 --dry-run true

A device call that cannot carry the dataset collects into a fresh root (with a `--seed` of its own,
or it draws the schedules the dataset already holds) and brings that back; this puts it in place:

* a task is matched by its workload's structural hash (the first field of its workload line), not
  by folder name; an unknown task's folder is added under its own name;
* a record whose trace is already stored for that workload is dropped (the stored measurement is
  kept), so merging the same tree twice changes nothing (two different traces that happen to give
  the same schedule both stay: telling them apart needs TVM to replay them);
* index.json: tasks, the networks' rows (the larger weight where both list a task), skipped tasks
  and the collections' settings are joined; the two targets must be the same;
* the destination's compression is kept (a task folder stored as `.json.xz` stays so; a new task
  is stored as the destination's others are), and every file is rewritten atomically
  (`data.atomic`), the index last.

A malformed line in either tree stops the merge before anything is written, naming file and line.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from jsonargparse import ArgumentParser

from data.record_tree import (
    DB_FILES,
    RECORD_FILE,
    WORKLOAD_FILE,
    XZ,
    database_file,
    device_folders,
    json_rows,
    new_index,
    read_index,
    task_dirs,
    write_database_file,
    write_index,
)

__all__ = ["MergeResult", "main", "merge_device"]


@dataclass
class MergeResult:
    """What a merge did (or, dry, would do)."""

    added: int = 0
    duplicates: int = 0
    new_tasks: list[str] = field(default_factory=list)
    topped_up: list[str] = field(default_factory=list)


def _rows(path: Path | None) -> list[tuple[str, list]]:
    """(text, JSON row) of every line of a database file (none if it is missing); malformed lines
    raise, named. The text is kept so that stored lines are written back byte for byte."""
    rows = []
    if path is None:
        return rows
    for lineno, line, row in json_rows(path):
        if not isinstance(row, list) or len(row) < 2:
            raise ValueError(f"{path}:{lineno}: malformed database line (not a [field, field, ...] row)")
        rows.append((line.strip(), row))
    return rows


@dataclass
class _Task:
    """One task folder in memory: its workload rows and record rows, and how it is stored."""

    folder: Path
    workloads: list[tuple[str, list]]
    records: list[tuple[str, list]]
    compressed: bool

    @classmethod
    def read(cls, folder: Path) -> _Task:
        records = database_file(folder, RECORD_FILE)
        task = cls(folder, _rows(database_file(folder, WORKLOAD_FILE)), _rows(records), records.name.endswith(XZ))
        for i, (_, r) in enumerate(task.records):
            if not (isinstance(r[1], list) and r[1] and isinstance(r[0], int)):
                raise ValueError(f"{records}: record {i + 1} is not [workload row, [trace, run_secs, ...]]")
        return task

    def hashes(self) -> list[str]:
        return [str(w[0]) for _, w in self.workloads]

    def write(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        for name, rows in zip(DB_FILES, (self.workloads, self.records), strict=True):
            write_database_file(self.folder, name, "".join(text + "\n" for text, _ in rows).encode(), self.compressed)


def _trace_key(record: list) -> str:
    """What makes a record the same schedule: its trace, key order normalized."""
    return json.dumps(record[1][0], sort_keys=True, separators=(",", ":"))


def _merge_index(dst: dict, src: dict, folder_of: dict[str, str]) -> None:
    """Join `src`'s index into `dst` in place; `folder_of` maps src task folders to dst ones."""
    for folder, meta in src.get("tasks", {}).items():
        target = folder_of.get(folder, folder)
        mine = dst["tasks"].setdefault(target, dict(meta))
        mine["networks"] = sorted(set(mine.get("networks", [])) | set(meta.get("networks", [])))
    for net, rows in src.get("networks", {}).items():
        have = {f: w for f, w in dst["networks"].get(net, [])}
        for folder, weight in rows:
            target = folder_of.get(folder, folder)
            have[target] = max(weight, have.get(target, weight))
        dst["networks"][net] = [[f, w] for f, w in have.items()]
    for folder, why in src.get("skipped", {}).items():
        dst.setdefault("skipped", {}).setdefault(folder_of.get(folder, folder), why)
    known = [json.dumps(c, sort_keys=True) for c in dst.get("collections", [])]
    for c in src.get("collections", []):
        if json.dumps(c, sort_keys=True) not in known:
            dst.setdefault("collections", []).append(c)


def _gpu_names(index: dict) -> set[str]:
    """The GPU models that measured an index's collections (its "gpus" entries; none for a CPU)."""
    return {g.get("name") for c in index.get("collections", []) for g in c.get("gpus", []) if g.get("name")}


def merge_device(src: Path, dst: Path, dry_run: bool = False) -> MergeResult:
    """Merge device folder `src` into device folder `dst` (created if missing); see the module doc.

    Raises:
        ValueError: the two indexes name different targets, or GPUs of different models measured
            them (an H100 and an H200 share the sm_90a target, not their latencies), or a database
            line is malformed (nothing is written then).
    """
    src, dst = Path(src), Path(dst)
    src_index, dst_index = read_index(src) or new_index(None), read_index(dst)
    if dst_index is None:
        dst_index = new_index(src_index.get("target"))
    if None not in (src_index.get("target"), dst_index.get("target")) and src_index["target"] != dst_index["target"]:
        raise ValueError(f"{src} and {dst} were collected for different targets; merge only the same device")
    theirs_gpu, ours_gpu = _gpu_names(src_index), _gpu_names(dst_index)
    if theirs_gpu and ours_gpu and theirs_gpu != ours_gpu:
        raise ValueError(
            f"{src} was measured on {', '.join(sorted(theirs_gpu))} and {dst} on {', '.join(sorted(ours_gpu))}: "
            "the same target, other latencies; keep them in separate trees"
        )
    theirs = [_Task.read(f) for f in task_dirs(src)]  # everything is read (and checked) before a write
    ours = [_Task.read(f) for f in task_dirs(dst)] if dst.is_dir() else []
    by_hash = {h: t for t in ours for h in t.hashes()}
    result, changed, folder_of = MergeResult(), [], {}
    for task in theirs:
        hashes = task.hashes()
        home = next((by_hash[h] for h in hashes if h in by_hash), None)
        if home is None:  # stored as the destination's tasks are (as the source's in a new tree)
            compressed = any(t.compressed for t in ours) if ours else task.compressed
            home = _Task(dst / task.folder.name, [], [], compressed)
            if home.folder.exists():
                raise ValueError(f"{home.folder}: exists with another workload than {task.folder}'s; rename one")
            result.new_tasks.append(task.folder.name)
        folder_of[task.folder.name] = home.folder.name
        slot = {}  # src workload row -> dst workload row
        for i, (text, w) in enumerate(task.workloads):
            mine = home.hashes()
            if str(w[0]) not in mine:
                home.workloads.append((text, w))
                mine.append(str(w[0]))
            slot[i] = mine.index(str(w[0]))
        stored = {(r[0], _trace_key(r)) for _, r in home.records}
        added = 0
        for text, r in task.records:
            if r[0] not in slot:
                raise ValueError(f"{task.folder}: a record names workload row {r[0]}, which its workload file lacks")
            key = (slot[r[0]], _trace_key(r))
            if key in stored:
                result.duplicates += 1
                continue
            stored.add(key)
            if slot[r[0]] != r[0]:  # its workload sits on another row here
                r = [slot[r[0]], *r[1:]]
                text = json.dumps(r, separators=(",", ":"))
            home.records.append((text, r))
            added += 1
        result.added += added
        if added and home.folder.name not in result.new_tasks:
            result.topped_up.append(home.folder.name)
        if added or home.folder.name in result.new_tasks:
            changed.append(home)
            by_hash.update({h: home for h in home.hashes()})
    if dry_run:
        return result
    for home in changed:
        home.write()
    _merge_index(dst_index, src_index, folder_of)
    write_index(dst, dst_index)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m data.merge", description=__doc__.split("\n\n")[0])
    parser.add_argument("src", type=str, help="a record tree root or device folder to merge from")
    parser.add_argument("dst", type=str, help="the record tree root to merge into (device folders by name)")
    parser.add_argument(
        "--dry-run",
        type=bool,
        nargs="?",
        const=True,
        default=False,
        help="count, write nothing (--dry-run or --dry-run true)",
    )
    args = parser.parse_args(argv)
    try:
        devices = device_folders(Path(args.src))
        for device in devices:
            r = merge_device(device, Path(args.dst) / device.name, dry_run=args.dry_run)
            print(
                f"{device} -> {Path(args.dst) / device.name}: {r.added} records added, {r.duplicates} already "
                f"stored, {len(r.new_tasks)} new tasks, {len(r.topped_up)} topped up"
                + (" (dry run)" if args.dry_run else "")
            )
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
