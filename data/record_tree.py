"""The record tree on disk: its paths, its index.json and its task-folder names, in one place.

    ROOT/<device>/index.json
    ROOT/<device>/<task_dir>/database_workload.json[.xz]
    ROOT/<device>/<task_dir>/database_tuning_record.json[.xz]

`data.collect` writes this tree and `data.records` reads it (and MetaSchedule work dirs: a bare
`database_*.json` pair, optionally with an index.json of the same format beside it). One task is
one workload on one device; it is identified everywhere by the workload's structural hash (the
first field of a `database_workload.json` line, `tvm_ffi.structural_hash` of the unscheduled
module, which is also how a tuning run's cost model keys its tasks): its folder is
`<task name>_<8 hex digits of that hash>` (`task_dir`) and its key in shards is
`<device>/<task_dir>` (`task_key`).

index.json (written atomically, `data.atomic`)::

    {"target": {...target JSON...},
     "tasks": {task_dir: {"name": str, "flops": float, "workload_hash": str, "networks": [str]}},
     "networks": {network: [[task_dir, weight], ...]},
     "skipped": {task_dir: reason}}

Reading never trusts the file: `read_index` checks that structure and raises `IndexFileError`
naming the file for anything else (not UTF-8, not JSON, wrong types), so a reader can count the
file as unreadable and go on. No TVM import here (`index_tasks` imports it when called).
"""

from __future__ import annotations

import json
import lzma
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from data.atomic import atomic_write_bytes, atomic_write_text

__all__ = [
    "DB_FILES",
    "INDEX",
    "RECORD_FILE",
    "WORKLOAD_FILE",
    "IndexFileError",
    "add_task",
    "database_file",
    "device_dirs",
    "device_folders",
    "index_tasks",
    "index_weights",
    "is_database",
    "json_rows",
    "new_index",
    "read_index",
    "read_lines",
    "stored_workload",
    "task_dir",
    "task_dirs",
    "task_key",
    "task_name",
    "write_database_file",
    "write_index",
]

WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"
DB_FILES = (WORKLOAD_FILE, RECORD_FILE)
INDEX = "index.json"
XZ = ".xz"


class IndexFileError(ValueError):
    """An index.json that cannot be used; the message names the file and what is wrong."""


# ----------------------------------------------------------------------------------------------
# Names
# ----------------------------------------------------------------------------------------------


def hash_suffix(workload_hash: str) -> str:
    """`_<8 hex digits>` of a structural hash (a decimal string as JSONDatabase writes it)."""
    try:
        return f"_{int(workload_hash) & 0xFFFFFFFF:08x}"
    except ValueError:
        return f"_{workload_hash[:8]}"


def task_dir(name: str, workload_hash: str) -> str:
    """`<name>_<8 hex digits of the workload's structural hash>`; a name that already ends that way
    (an existing task folder) is kept."""
    suffix = hash_suffix(workload_hash)
    return name if name.endswith(suffix) else name + suffix


def task_name(folder_name: str) -> str:
    """The task name of a task folder (its name without the hash suffix)."""
    return folder_name.rsplit("_", 1)[0] if "_" in folder_name else folder_name


def task_key(device: str, folder_name: str) -> str:
    """The task's key in shards: `<device>/<task_dir>`."""
    return f"{device}/{folder_name}"


# ----------------------------------------------------------------------------------------------
# Database files
# ----------------------------------------------------------------------------------------------


def database_file(folder: Path, name: str) -> Path | None:
    """`folder/name` or `folder/name.xz`, whichever exists (None if neither)."""
    plain = Path(folder) / name
    if plain.exists():
        return plain
    packed = plain.with_name(plain.name + XZ)
    return packed if packed.exists() else None


def is_database(folder: Path) -> bool:
    """True when `folder` holds a tuning-record file (plain or xz)."""
    return database_file(folder, RECORD_FILE) is not None


def read_lines(path: Path) -> Iterator[tuple[int, str | UnicodeDecodeError]]:
    """(1-based line number, text) of every non-empty line of a database file (plain or `.xz`).

    Lines are decoded one by one, so a byte that is not UTF-8 costs its own line only: that line
    comes back as the `UnicodeDecodeError` instead of its text. A file that cannot be read further
    (torn xz stream, I/O error) raises after its good lines; the caller names the next line.
    """
    opener = lzma.open if path.name.endswith(XZ) else open
    with opener(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                yield lineno, err
                continue
            if text.strip():
                yield lineno, text


def json_rows(path: Path, what: str = "database line") -> Iterator[tuple[int, str, Any]]:
    """(1-based line number, text, parsed JSON) of every non-empty line of a database file.

    Raises:
        ValueError: a line that is not UTF-8 JSON, as "<path>:<line>: malformed <what> (<why>)".
    """
    for lineno, line in read_lines(path):
        try:
            if isinstance(line, UnicodeDecodeError):
                raise line
            row = json.loads(line)
        except ValueError as err:
            raise ValueError(f"{path}:{lineno}: malformed {what} ({err})") from None
        yield lineno, line, row


def stored_workload(folder: Path) -> list[str]:
    """The first workload line of a task folder, `[structural hash, base64 module]` as MetaSchedule's
    `Workload.from_json` takes it (a collected task folder holds exactly one workload).

    Raises:
        ValueError: no workload file, or a first line of another shape, naming the file and line.
    """
    path = database_file(Path(folder), WORKLOAD_FILE)
    if path is None:
        raise ValueError(f"{folder}: no {WORKLOAD_FILE}[{XZ}]")
    for lineno, _, row in json_rows(path, "workload line"):
        if not (isinstance(row, list) and len(row) == 2 and all(isinstance(x, str) for x in row)):
            raise ValueError(f"{path}:{lineno}: malformed workload line (expected [structural hash, base64 module])")
        return row
    raise ValueError(f"{path}: no workload line")


def write_database_file(folder: Path, name: str, data: bytes, compressed: bool) -> None:
    """Store `data` as `folder/name.xz` (xz -9e) or plain `folder/name`, atomically, and remove the
    other form once the new one is in place."""
    plain, packed = Path(folder) / name, Path(folder) / (name + XZ)
    if compressed:
        atomic_write_bytes(packed, lzma.compress(data, preset=9 | lzma.PRESET_EXTREME))
        plain.unlink(missing_ok=True)
    else:
        atomic_write_bytes(plain, data)
        packed.unlink(missing_ok=True)


def task_dirs(device_dir: Path) -> list[Path]:
    """The task folders (database folders) of a device folder, sorted by name."""
    return sorted(p for p in Path(device_dir).iterdir() if p.is_dir() and is_database(p))


def device_dirs(path: Path) -> tuple[str, list[Path]]:
    """What `path` is: ("database", [path]), ("device", [path]) or ("root", [device folders]).

    Raises:
        ValueError: `path` is not a folder, or holds no records at any of the three levels.
    """
    path = Path(path)
    if not path.is_dir():
        raise ValueError(f"{path}: not a folder of MetaSchedule records")
    if is_database(path):
        return "database", [path]
    subdirs = sorted(p for p in path.iterdir() if p.is_dir())
    if (path / INDEX).exists() or any(is_database(p) for p in subdirs):
        return "device", [path]
    devices = [p for p in subdirs if (p / INDEX).exists() or task_dirs(p)]
    if not devices:
        raise ValueError(
            f"{path}: no {RECORD_FILE}[.xz] here, in its subfolders (a device folder) or two levels down (a tree root)"
        )
    return "root", devices


def device_folders(path: Path) -> list[Path]:
    """The device folders of a tree root, or [path] for a device folder (`device_dirs`).

    Raises:
        ValueError: `path` is a single task folder, or not a record tree at all.
    """
    kind, devices = device_dirs(path)
    if kind == "database":
        raise ValueError(f"{path}: a task folder; give its device folder or the tree's root")
    return devices


# ----------------------------------------------------------------------------------------------
# index.json
# ----------------------------------------------------------------------------------------------


def new_index(target: dict | None) -> dict:
    """An empty index for `target` (its JSON)."""
    return {"target": target, "networks": {}, "tasks": {}, "skipped": {}}


def _check(ok: bool, path: Path, what: str) -> None:
    if not ok:
        raise IndexFileError(f"{path}: {what}; not a record-tree index.json")


def _check_index(index: Any, path: Path) -> dict:
    _check(isinstance(index, dict), path, f"top level is a {type(index).__name__}, expected an object")
    target = index.get("target")
    _check(target is None or isinstance(target, dict), path, f"'target' is {target!r}, expected an object")
    tasks = index.setdefault("tasks", {})
    _check(isinstance(tasks, dict), path, "'tasks' is not an object")
    for folder, meta in tasks.items():
        _check(isinstance(meta, dict), path, f"tasks[{folder!r}] is not an object")
        name, flops, nets = meta.get("name"), meta.get("flops", 0), meta.get("networks", [])
        _check(name is None or isinstance(name, str), path, f"tasks[{folder!r}].name is {name!r}, expected a string")
        _check(
            isinstance(flops, (int, float)) and not isinstance(flops, bool) or flops is None,
            path,
            f"tasks[{folder!r}].flops is {flops!r}, expected a number",
        )
        _check(
            isinstance(nets, list) and all(isinstance(n, str) for n in nets),
            path,
            f"tasks[{folder!r}].networks is {nets!r}, expected a list of names",
        )
    networks = index.setdefault("networks", {})
    _check(isinstance(networks, dict), path, "'networks' is not an object")
    for net, rows in networks.items():
        _check(
            isinstance(rows, list)
            and all(
                isinstance(r, list)
                and len(r) == 2
                and isinstance(r[0], str)
                and isinstance(r[1], (int, float))
                and not isinstance(r[1], bool)
                for r in rows
            ),
            path,
            f"networks[{net!r}] is not a list of [task_dir, weight]",
        )
    skipped = index.setdefault("skipped", {})
    _check(isinstance(skipped, dict), path, "'skipped' is not an object")
    return index


def read_index(folder: Path) -> dict | None:
    """The index.json of a device folder (or work dir); None when there is none.

    Raises:
        IndexFileError: naming the file when it is not UTF-8, not JSON, or not of the format above.
    """
    path = Path(folder) / INDEX
    if not path.exists():
        return None
    try:
        index = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as err:
        raise IndexFileError(f"{path}: not UTF-8 text ({err})") from None
    except json.JSONDecodeError as err:
        raise IndexFileError(f"{path}: not valid JSON ({err})") from None
    except OSError as err:
        raise IndexFileError(f"{path}: cannot be read ({err})") from None
    return _check_index(index, path)


def write_index(folder: Path, index: dict) -> None:
    """Write `index` to `folder/index.json` atomically (sorted keys, one line per entry)."""
    atomic_write_text(Path(folder) / INDEX, json.dumps(index, indent=1, sort_keys=True) + "\n")


def index_weights(index: dict) -> dict[str, dict[str, float]]:
    """task_dir -> {network: weight}: the "networks" rows, plus the networks a task lists itself
    (weight 1 when the rows do not give one)."""
    weights: dict[str, dict[str, float]] = {}
    for net, rows in index.get("networks", {}).items():
        for folder, weight in rows:
            weights.setdefault(folder, {})[net] = float(weight)
    for folder, meta in index.get("tasks", {}).items():
        for net in meta.get("networks", []):
            weights.setdefault(folder, {}).setdefault(net, 1.0)
    return weights


def add_task(index: dict, folder: str, name: str, flops: float, workload_hash: str, networks: dict[str, float]) -> None:
    """List a task (and its weight in each of `networks`) in `index`, keeping what is there."""
    entry = index["tasks"].setdefault(
        folder, {"name": name, "flops": flops, "workload_hash": workload_hash, "networks": []}
    )
    entry["networks"] = sorted(set(entry["networks"]) | set(networks))
    for net, weight in networks.items():
        rows = dict(index["networks"].get(net, []))
        rows[folder] = weight
        index["networks"][net] = [[d, w] for d, w in rows.items()]


def index_tasks(work_dir: str | Path, tasks: Iterable[Any], target: Any, network: str | None = None) -> dict:
    """Write an index.json into a MetaSchedule work dir, so its records keep their task names and
    network when featurized (`python -m data.featurize WORK_DIR`).

    For a user's own tuning script: pass the tasks it tuned, e.g. the `ExtractedTask`s of
    `ms.relax_integration.extract_tasks` (task_name, mod, weight), or (name, IRModule, weight)
    tuples. An existing index is extended.

    Args:
        work_dir: the folder with database_workload.json / database_tuning_record.json.
        tasks: ExtractedTask objects or (name, IRModule or PrimFunc, weight) tuples.
        target: the tuning target (tvm Target, tag or JSON dict).
        network: the network these tasks belong to (None: single operators).

    Returns:
        The index written.
    """
    import tvm_ffi
    from tvm.s_tir.meta_schedule.tune_context import _normalize_mod
    from tvm.s_tir.meta_schedule.utils import _json_de_tvm

    from tvm_env import parse_target

    work_dir = Path(work_dir)
    target_json = json.loads(json.dumps(_json_de_tvm(parse_target(target).export())))
    index = read_index(work_dir) or new_index(target_json)
    if index.get("target") is None:
        index["target"] = target_json
    for task in tasks:
        name, mod, weight = (task.task_name, task.mod, task.weight) if hasattr(task, "task_name") else task
        mod = _normalize_mod(mod)  # a PrimFunc as tune_tir takes it -> the module its database stores
        shash = str(tvm_ffi.structural_hash(mod))
        flops = _flops(mod)
        add_task(index, task_dir(name, shash), name, flops, shash, {network: int(weight)} if network else {})
    write_index(work_dir, index)
    return index


def _flops(mod: Any) -> float:
    import tvm

    try:
        return float(tvm.s_tir.analysis.estimate_tir_flops(mod))
    except Exception:  # a module FLOPs cannot be estimated for (e.g. no loops): unknown is 0
        return 0.0
