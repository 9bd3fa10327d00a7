"""HDF5 feature shards: the featurizer writes them, the DataModule reads them.

No TVM import (a GPU box without TVM trains from shards); h5py and numpy only.

One shard file holds a group of whole tasks (the records of one task are never split, so per-task
labels and task-grouped batches need only one file). Variable-length per-program rows are stored
CSR-style: `stmt[stmt_ptr[i]:stmt_ptr[i + 1]]` are the statement rows of record `i` (same for
`access` and `psa`). Every dataset, dtype and shape is listed in `FIELDS` and documented in
docs/data-format.md.

Shard files carry no timestamp, so the same records featurized with the same options give
byte-identical files whatever the number of workers. Writes are atomic (temp file + os.replace).

Why one module of about 570 lines: it is the one owner of the shard file format. The field table,
the writer, the reader with its schema and finiteness checks, the folder checks and the manifest
change together whenever a field is added; split, each change would touch several files that must
agree byte for byte.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from data.atomic import atomic_path, atomic_write_text
from data.schema import (
    ACCESS_DIM,
    GEMM_ROWS,
    PSA_DIM,
    SCHEMA_VERSION,
    STMT_DIM,
    TAG_DIM,
)

__all__ = [
    "FIELDS",
    "MANIFEST",
    "SHARD_SUFFIX",
    "ShardData",
    "ShardError",
    "list_shards",
    "read_manifest",
    "read_shard",
    "read_shard_attrs",
    "read_shards",
    "shard_is_valid",
    "task_network_sets",
    "write_manifest",
    "write_shard",
]

SHARD_SUFFIX = ".h5"
MANIFEST = "manifest.json"
_STR = h5py.string_dtype("utf-8")


@dataclasses.dataclass(frozen=True)
class Field:
    """One dataset of a shard.

    `axis` says what the first dimension counts: 'task' (T), 'record' (N), 'ptr' (N + 1) or the name
    of the CSR row array it indexes ('stmt', 'access', 'psa': R, A, P rows).
    """

    dtype: Any
    tail: tuple[int, ...]
    axis: str
    doc: str


FIELDS: dict[str, Field] = {
    "task_key": Field(str, (), "task", '"<device>/<task_dir>", unique over the dataset'),
    "task_name": Field(str, (), "task", "MetaSchedule task name, e.g. fused_conv2d_add_relu"),
    "task_networks": Field(str, (), "task", "comma-separated networks using the task, '' for single operators"),
    "task_target": Field(str, (), "task", "target JSON (Target.export())"),
    "task_weight": Field(
        np.float64, (), "task", "max over networks of the task's weight (call count) in a network; 1 for operators"
    ),
    "task_network_weights": Field(str, (), "task", 'JSON {"network": weight} of every network using the task'),
    "task_flops": Field(np.float64, (), "task", "float operations of the workload (0 when unknown)"),
    "task_tags": Field(np.float32, (TAG_DIM,), "task", "workload tags (data.schema.TAG_NAMES)"),
    "record_task": Field(np.int64, (), "record", "index into the task_* arrays"),
    "record_source": Field(str, (), "record", '"<tuning record file>:<line>" the record came from'),
    "latency": Field(np.float64, (), "record", "mean run_secs in seconds (data.labels.mean_latency); inf = failed"),
    "label": Field(np.float32, (), "record", "best finite latency of the task / latency, in (0, 1]; 0 = failed"),
    "stmt_ptr": Field(np.int64, (), "ptr", "CSR offsets into stmt"),
    "stmt": Field(np.float32, (STMT_DIM,), "stmt", "MetaSchedule PerStoreFeature rows"),
    "access_ptr": Field(np.int64, (), "ptr", "CSR offsets into access"),
    "access": Field(np.float32, (ACCESS_DIM,), "access", "per-access records, program order (docs/pruner.md 1.1)"),
    "psa_ptr": Field(np.int64, (), "ptr", "CSR offsets into psa"),
    "psa": Field(np.float32, (PSA_DIM,), "psa", "PSA rows, one per stored buffer (docs/pruner.md 4.1)"),
    "gemm": Field(
        np.float32,
        (GEMM_ROWS, ACCESS_DIM),
        "record",
        "GEMM matrix: the 8 access records at the needle, zeros if absent",
    ),
    "gemm_found": Field(np.bool_, (), "record", "whether the needle '20101112' was found"),
}
_CSR = {"stmt": "stmt_ptr", "access": "access_ptr", "psa": "psa_ptr"}


class ShardError(ValueError):
    """A shard file that cannot be used (corrupt, wrong schema version, inconsistent arrays)."""


def _empty(name: str) -> np.ndarray:
    f = FIELDS[name]
    if name.endswith("_ptr"):
        return np.zeros(1, np.int64)
    return np.zeros((0, *f.tail), dtype=np.str_ if f.dtype is str else f.dtype)


@dataclasses.dataclass
class ShardData:
    """Feature arrays of T tasks and their N records (numpy; see `FIELDS` for each array's meaning).

    Shapes: task_* (T,) except task_tags (T, 10); record_task, record_source, latency, label,
    gemm_found (N,); gemm (N, 8, 23); *_ptr (N + 1,); stmt (R, 164), access (A, 23), psa (P, 11).
    String arrays are numpy unicode arrays.
    """

    task_key: np.ndarray
    task_name: np.ndarray
    task_networks: np.ndarray
    task_target: np.ndarray
    task_weight: np.ndarray
    task_network_weights: np.ndarray
    task_flops: np.ndarray
    task_tags: np.ndarray
    record_task: np.ndarray
    record_source: np.ndarray
    latency: np.ndarray
    label: np.ndarray
    stmt_ptr: np.ndarray
    stmt: np.ndarray
    access_ptr: np.ndarray
    access: np.ndarray
    psa_ptr: np.ndarray
    psa: np.ndarray
    gemm: np.ndarray
    gemm_found: np.ndarray

    @classmethod
    def empty(cls) -> ShardData:
        return cls(**{name: _empty(name) for name in FIELDS})

    @property
    def num_tasks(self) -> int:
        return len(self.task_key)

    @property
    def num_records(self) -> int:
        return len(self.record_task)

    def psa_programs(self, records: Iterable[int] | None = None) -> list[np.ndarray]:
        """The PSA rows of each of `records` (default: every record, in order), slices of `psa`."""
        indices = range(self.num_records) if records is None else records
        return [self.psa[self.psa_ptr[i] : self.psa_ptr[i + 1]] for i in indices]

    def validate(self, where: str = "ShardData") -> None:
        """Check dtypes, shapes and CSR consistency.

        Raises:
            ShardError: naming `where` (the file) and the first inconsistent array.
        """
        n_task, n_rec = self.num_tasks, self.num_records
        for name, f in FIELDS.items():
            arr = getattr(self, name)
            if not isinstance(arr, np.ndarray):
                raise ShardError(f"{where}: {name} is a {type(arr).__name__}, expected numpy.ndarray")
            if f.dtype is str:
                ok_dtype = arr.dtype.kind == "U" or (arr.dtype == object and all(isinstance(s, str) for s in arr))
            else:
                ok_dtype = arr.dtype == np.dtype(f.dtype)
            if not ok_dtype:
                raise ShardError(f"{where}: {name} has dtype {arr.dtype}, expected {np.dtype(f.dtype)}")
            first = {"task": n_task, "record": n_rec, "ptr": n_rec + 1}.get(f.axis)
            if first is None:
                first = int(getattr(self, _CSR[f.axis])[-1]) if len(getattr(self, _CSR[f.axis])) else 0
            if arr.shape != (first, *f.tail):
                raise ShardError(f"{where}: {name} has shape {arr.shape}, expected {(first, *f.tail)}")
        for ptr_name in _CSR.values():
            ptr = getattr(self, ptr_name)
            if ptr[0] != 0 or (np.diff(ptr) < 0).any():
                raise ShardError(f"{where}: {ptr_name} must start at 0 and be non-decreasing")
        if n_rec and (self.record_task.min() < 0 or self.record_task.max() >= n_task):
            raise ShardError(f"{where}: record_task out of range [0, {n_task})")
        if len(set(self.task_key.tolist())) != n_task:
            raise ShardError(f"{where}: task_key has duplicates")
        self._check_finite(where)

    def _check_finite(self, where: str) -> None:
        """Every float must be finite, except `latency` (inf = failed; NaN is not); labels in [0, 1].

        Raises:
            ShardError: naming `where`, the field, how many values are bad and the first one's record
                (its record_source "file:line") or task.
        """
        for name, f in FIELDS.items():
            arr = getattr(self, name)
            if f.dtype is str or np.dtype(f.dtype).kind != "f" or arr.size == 0:
                continue
            if name == "latency":
                bad = np.isnan(arr) | (arr <= 0)
                what = "NaN or non-positive"
            elif name == "label":
                bad = ~np.isfinite(arr) | (arr < 0) | (arr > 1)
                what = "non-finite or outside [0, 1]"
            else:
                bad = ~np.isfinite(arr)
                what = "non-finite (NaN or inf)"
            bad = bad.reshape(len(arr), -1).any(axis=1)
            if not bad.any():
                continue
            first = int(np.flatnonzero(bad)[0])
            if f.axis == "task":
                at = f"task {self.task_key[first]!r}"
            else:
                record = (
                    first if f.axis == "record" else int(np.searchsorted(getattr(self, _CSR[name]), first, "right")) - 1
                )
                at = f"record {record} ({self.record_source[record]})"
            raise ShardError(
                f"{where}: {name} has {int(bad.sum())} {what} value(s), the first in {at}; "
                "re-featurize the records (python -m data.featurize)"
            )

    def select_tasks(self, keep: np.ndarray) -> ShardData:
        """The tasks where `keep` (T,) bool is set, with all their records; record_task re-indexed."""
        keep = np.asarray(keep, dtype=bool)
        if keep.shape != (self.num_tasks,):
            raise ValueError(f"keep has shape {keep.shape}, expected ({self.num_tasks},)")
        new_index = np.cumsum(keep) - 1
        rec = np.flatnonzero(keep[self.record_task])
        out = {name: getattr(self, name)[keep] for name, f in FIELDS.items() if f.axis == "task"}
        out.update({name: getattr(self, name)[rec] for name, f in FIELDS.items() if f.axis == "record"})
        out["record_task"] = new_index[self.record_task[rec]].astype(np.int64)
        for rows, ptr_name in _CSR.items():
            ptr, arr = getattr(self, ptr_name), getattr(self, rows)
            lengths = np.diff(ptr)[rec]
            out[ptr_name] = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
            idx = np.concatenate([np.arange(ptr[i], ptr[i + 1]) for i in rec]) if len(rec) else np.zeros(0, int)
            out[rows] = arr[idx]
        return ShardData(**out)

    @classmethod
    def concat(cls, parts: Sequence[ShardData]) -> ShardData:
        """Concatenate shards: record_task and CSR pointers are re-based."""
        if not parts:
            return cls.empty()
        out: dict[str, np.ndarray] = {}
        for name, f in FIELDS.items():
            if f.axis == "ptr":
                offsets = np.cumsum([0] + [int(getattr(p, name)[-1]) for p in parts[:-1]])
                out[name] = np.concatenate(
                    [[0]] + [getattr(p, name)[1:] + off for p, off in zip(parts, offsets)]
                ).astype(np.int64)
            elif name == "record_task":
                offsets = np.cumsum([0] + [p.num_tasks for p in parts[:-1]])
                out[name] = np.concatenate([p.record_task + off for p, off in zip(parts, offsets)]).astype(np.int64)
            else:
                out[name] = np.concatenate([getattr(p, name) for p in parts])
        return cls(**out)


def _check_attrs(attrs: dict) -> dict[str, Any]:
    """Attributes as HDF5 can store them: scalars and strings kept, dicts/lists stored as JSON."""
    out = {}
    for key, value in attrs.items():
        if not isinstance(key, str):
            raise TypeError(f"attrs key {key!r} must be a str")
        if isinstance(value, (dict, list, tuple)):
            value = json.dumps(value, sort_keys=True)
        elif value is None:
            value = "null"
        elif not isinstance(value, (str, int, float, bool, np.integer, np.floating)):
            raise TypeError(f"attrs[{key!r}] = {value!r} is not a str, number, bool, list or dict")
        out[key] = value
    return out


def write_shard(path: str | os.PathLike, data: ShardData, attrs: dict) -> None:
    """Write `data` to the HDF5 file `path` atomically (temp file in the same folder + os.replace).

    `attrs` (tool options, TVM version, sources...) are stored as file attributes; dicts and lists as
    JSON strings. `schema_version` is always data.schema.SCHEMA_VERSION. No timestamps are written,
    so equal inputs give byte-identical files.

    Raises:
        ShardError: if `data` is inconsistent (nothing is written then).
    """
    path = Path(path)
    data.validate(str(path))
    stored = _check_attrs(attrs)
    stored["schema_version"] = SCHEMA_VERSION
    with atomic_path(path) as tmp:
        with h5py.File(tmp, "w", track_order=True) as h5:
            for key in sorted(stored):
                h5.attrs[key] = stored[key]
            for name, f in FIELDS.items():
                arr = getattr(data, name)
                if f.dtype is str:
                    h5.create_dataset(name, data=arr.astype(object), dtype=_STR, track_times=False)
                elif arr.ndim == 2 and arr.shape[0] > 0:
                    h5.create_dataset(
                        name,
                        data=arr,
                        compression="gzip",
                        compression_opts=4,
                        shuffle=True,
                        chunks=(min(len(arr), 4096), arr.shape[1]),
                        track_times=False,
                    )
                else:
                    h5.create_dataset(name, data=arr, track_times=False)


def _open(path: Path) -> h5py.File:
    try:
        return h5py.File(path, "r")
    except OSError as err:
        raise ShardError(f"{path}: not a readable HDF5 shard ({err})") from err


def _schema_check(path: Path, h5: h5py.File) -> None:
    version = h5.attrs.get("schema_version")
    if version is None:
        raise ShardError(f"{path}: no schema_version attribute; not a pruner-lightning feature shard")
    if int(version) != SCHEMA_VERSION:
        raise ShardError(
            f"{path}: shard schema version {int(version)} but this code reads version {SCHEMA_VERSION}; "
            "re-featurize the records (python -m data.featurize) or use the matching code version"
        )


def read_shard_attrs(path: str | os.PathLike) -> dict[str, Any]:
    """File attributes of one shard (schema version checked); JSON strings are decoded."""
    path = Path(path)
    with _open(path) as h5:
        _schema_check(path, h5)
        out = {}
        for key, value in h5.attrs.items():
            if isinstance(value, bytes):
                value = value.decode()
            if isinstance(value, str) and value[:1] in "[{n":
                try:
                    value = json.loads(value)
                except json.JSONDecodeError:
                    pass
            elif isinstance(value, np.generic):
                value = value.item()
            out[key] = value
        return out


def read_shard(path: str | os.PathLike) -> ShardData:
    """One shard file into memory.

    Raises:
        ShardError: naming the file when it is not HDF5, is truncated, has another schema version,
            misses a dataset or has inconsistent arrays.
    """
    path = Path(path)
    with _open(path) as h5:
        _schema_check(path, h5)
        out = {}
        for name, f in FIELDS.items():
            if name not in h5:
                raise ShardError(f"{path}: dataset {name!r} is missing")
            try:
                ds = h5[name]
                out[name] = np.array(ds.asstr()[()], dtype=np.str_) if f.dtype is str else ds[()]
            except (OSError, ValueError, KeyError) as err:
                raise ShardError(f"{path}: dataset {name!r} cannot be read ({err})") from err
            if f.dtype is str and out[name].shape == (0,):
                out[name] = _empty(name)
    data = ShardData(**out)
    data.validate(str(path))
    return data


def list_shards(directory: str | os.PathLike) -> list[Path]:
    """Shard files of a folder, sorted by name (temp files of unfinished writes are not listed)."""
    return sorted(p for p in Path(directory).glob(f"*{SHARD_SUFFIX}") if not p.name.startswith("."))


def shard_is_valid(path: str | os.PathLike) -> bool:
    """True when `path` reads as a complete shard of this schema version (resume uses this)."""
    try:
        read_shard(path)
    except ShardError:
        return False
    return True


def _check_folder(directory: Path, found: list[Path]) -> None:
    """Refuse a folder whose manifest names the digest of every shard, when a shard differs (made
    from other inputs: an interrupted re-featurize, stale files) or is missing."""
    if not (directory / MANIFEST).exists():
        return
    expected = read_manifest(directory).get("expected")
    if expected is None:
        return
    for path in found:
        digest = read_shard_attrs(path).get("input_digest")
        if expected.get(path.name) != digest:
            why = "is not in" if path.name not in expected else "was made from other inputs than"
            raise ShardError(
                f"{path}: {why} the run its folder's manifest.json records; re-run data.featurize to finish or "
                "rebuild the folder (--overwrite deletes stale shards)"
            )
    missing = sorted(set(expected) - {p.name for p in found})
    if missing:
        raise ShardError(
            f"{directory}: {len(missing)} shard(s) of its manifest.json are missing ({', '.join(missing[:3])}); "
            "the featurize run is unfinished: re-run it"
        )


def task_network_sets(task_networks: Iterable[str]) -> list[set[str]]:
    """The networks of each task, from `ShardData.task_networks` ("a,b"; "" for a single operator)."""
    return [set(filter(None, nets.split(","))) for nets in task_networks]


def _expand(paths_or_dir: str | os.PathLike | Iterable[str | os.PathLike]) -> list[Path]:
    if isinstance(paths_or_dir, (str, os.PathLike)):
        paths_or_dir = [paths_or_dir]
    files: list[Path] = []
    for p in map(Path, paths_or_dir):
        if p.is_dir():
            found = list_shards(p)
            if not found:
                raise ShardError(f"{p}: no *{SHARD_SUFFIX} shard files in this folder")
            _check_folder(p, found)
            files += found
        elif p.exists():
            files.append(p)
        else:
            raise ShardError(f"{p}: no such shard file or folder")
    return files


def read_shards(
    paths_or_dir: str | os.PathLike | Iterable[str | os.PathLike], *, networks: Iterable[str] | None = None
) -> ShardData:
    """Read and concatenate shards (files, or folders of `*.h5`), re-indexing record_task.

    Args:
        paths_or_dir: a shard file, a shard folder, or a list of either.
        networks: keep only tasks used by at least one of these networks (task_networks); None keeps
            all tasks, including single operators.

    Raises:
        ShardError: naming the file for corrupt shards, schema-version mismatches, or a task key that
            appears in two shards.
    """
    wanted = None if networks is None else set(networks)
    parts, owner = [], {}
    for path in _expand(paths_or_dir):
        part = read_shard(path)
        for key in part.task_key.tolist():
            if key in owner:
                raise ShardError(f"{path}: task {key!r} is also in {owner[key]}; shards must hold disjoint tasks")
            owner[key] = path
        if wanted is not None:
            keep = np.array([bool(wanted & nets) for nets in task_network_sets(part.task_networks)], dtype=bool)
            part = part.select_tasks(keep)
        parts.append(part)
    return ShardData.concat(parts)


def write_manifest(
    directory: str | os.PathLike, inputs: dict | None = None, expected: dict[str, str] | None = None
) -> dict:
    """(Re)build `manifest.json` of a shard folder from the shard files themselves (atomic write).

    Independent featurizer processes writing disjoint shards into one folder each call this; the
    counts always reflect the files present, so it can be rebuilt at any time
    (`python -m data.shards DIR`). Unreadable or other-version shards are listed under "invalid".

    Args:
        inputs: what the folder was made from (the featurizer's record folders and options).
        expected: shard file name -> the input digest it must carry (every file of the run's plan).
            A shard whose digest differs, or that the plan does not name, is listed under "stale" and
            not counted; a planned file not there yet under "missing". Both default to the existing
            manifest's, so a rebuild keeps them.

    Returns:
        The manifest: {"schema_version", "updated", "num_tasks", "num_records",
        "shards": [{"file", "records", "tasks": {task_key: records}}], "invalid": [{"file", "error"}],
        "inputs", "expected", "stale": [{"file", "error"}], "missing": [file], "complete": bool}.
    """
    directory = Path(directory)
    if inputs is None and expected is None:
        try:
            previous = read_manifest(directory)
        except ShardError:
            previous = {}
        inputs, expected = previous.get("inputs"), previous.get("expected")
    shards, invalid, stale = [], [], []
    present = set()
    for path in list_shards(directory):
        try:
            with _open(path) as h5:
                _schema_check(path, h5)
                keys = h5["task_key"].asstr()[()].tolist()
                counts = np.bincount(h5["record_task"][()], minlength=len(keys)).tolist()
                digest = h5.attrs.get("input_digest")
        except (ShardError, KeyError, OSError) as err:
            invalid.append({"file": path.name, "error": str(err)})
            continue
        present.add(path.name)
        if expected is not None and expected.get(path.name) != (
            digest.decode() if isinstance(digest, bytes) else digest
        ):
            why = "not made by this folder's run" if path.name not in expected else "made from other inputs"
            stale.append({"file": path.name, "error": f"{why}; re-run data.featurize (--overwrite)"})
            continue
        shards.append({"file": path.name, "records": int(sum(counts)), "tasks": dict(zip(keys, counts))})
    missing = sorted(set(expected or ()) - present)
    manifest = {
        "schema_version": SCHEMA_VERSION,
        "updated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "num_tasks": sum(len(s["tasks"]) for s in shards),
        "num_records": sum(s["records"] for s in shards),
        "shards": shards,
        "invalid": invalid,
        "inputs": inputs,
        "expected": expected,
        "stale": stale,
        "missing": missing,
        "complete": not (invalid or stale or missing),
    }
    atomic_write_text(directory / MANIFEST, json.dumps(manifest, indent=1))
    return manifest


def read_manifest(directory: str | os.PathLike) -> dict:
    """The manifest of a shard folder.

    Raises:
        ShardError: if it is missing, not JSON, or of another schema version.
    """
    path = Path(directory) / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ShardError(f"{path}: cannot read the manifest ({err}); rebuild it with python -m data.shards") from err
    if manifest.get("schema_version") != SCHEMA_VERSION:
        raise ShardError(
            f"{path}: manifest schema version {manifest.get('schema_version')} but this code reads version "
            f"{SCHEMA_VERSION}"
        )
    return manifest


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m data.shards DIR...`: rebuild each folder's manifest and print a summary."""
    from jsonargparse import ArgumentParser  # here: reading shards needs no jsonargparse (GPU runs lack it)

    parser = ArgumentParser(description=main.__doc__)
    parser.add_argument("dirs", nargs="+", help="shard folders")
    args = parser.parse_args(argv)
    status = 0
    for d in args.dirs:
        m = write_manifest(d)
        print(f"{d}: {len(m['shards'])} shards, {m['num_tasks']} tasks, {m['num_records']} records")
        for kind in ("invalid", "stale"):
            for bad in m[kind]:
                print(f"  {kind} {bad['file']}: {bad['error']}", file=sys.stderr)
                status = 1
        if m["missing"]:
            print(f"  missing: {', '.join(m['missing'])}", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
