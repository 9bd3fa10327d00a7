"""Featurize measured MetaSchedule records into HDF5 shards.

    python -m data.featurize RECORDS... --out SHARDS_DIR --workers N
        [--shard-index i --num-shards n] [--tasks-per-shard K] [--failed drop|zero]
        [--network NAME] [--overwrite] [--config FILE] [--print_config]

RECORDS are database folders or TenSet-style trees (data.records). For every record the trace is
replayed on its workload and everything is computed from that schedule (data.features): the
PerStoreFeature rows (C++, batched per task) and, from one lowering, the access records, GEMM matrix
and PSA rows; per task the 10 workload tags and the labels (data.labels).

Tasks, sorted by key, are cut into groups of `--tasks-per-shard`; group g is written to
`shard-<g>.h5` by one worker process (TVM objects do not pickle, so workers get plain-Python records
and rebuild modules themselves). The output does not depend on `--workers`: shard files are
byte-identical. A shard whose file is valid and was made from the same inputs and options (an input
digest stored in the file) is skipped, so an interrupted run resumes; with `--shard-index i
--num-shards n` a process only does the groups g with g % n == i, so independent processes can fill
one folder; each rebuilds manifest.json from the files present (`python -m data.shards DIR` does
it again at the end). Skipped records are counted by reason with file:line examples.

The manifest records the run's inputs (record folders, options, task and record counts) and the
digest every shard must carry; shards made from other inputs are never mixed in silently: a planned
shard file from other inputs is rebuilt (said on stderr), and a shard file the plan does not name
(other records, another --tasks-per-shard) makes the run refuse, unless --overwrite deletes it.

Why one module of about 530 lines: the plan (task groups and their input digests), the resume and
stale-shard rules and the worker processes that execute the plan are one mechanism; the feature
computation itself lives in data.features and the file format in data.shards.
`featurize_in_memory` is the same featurization without the plan and the files (for studies that
need part of the features, e.g. PSA rows alone); it shares `featurize_task` and the shard assembly.

A tuning work dir keeps its task names and networks when an index.json lies beside its database
(`data.record_tree.index_tasks`); `--network NAME` names the network of bare databases, so the
hold-out-by-network split works on a user's own tuning data. A task is its folder: the same workload
under two folder names (two trees, a work dir beside a tree) is two tasks, and featurize warns,
naming them, since a split by network could then put one workload on both sides.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import multiprocessing
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from jsonargparse import ActionConfigFile, ArgumentParser
from tqdm import tqdm

from data.records import FAILED_POLICIES, ReadSummary, Record, Task, read_records
from data.schema import ACCESS_DIM, GEMM_ROWS, PSA_DIM, STMT_DIM, TAG_DIM
from data.shards import (
    ShardData,
    ShardError,
    list_shards,
    read_shard_attrs,
    shard_is_valid,
    write_manifest,
    write_shard,
)

__all__ = ["FeaturizeConfig", "featurize", "featurize_in_memory", "featurize_task", "main", "plan_groups"]

log = logging.getLogger(__name__)
TRACE_FAILED = "trace no longer applies"
LOWERING_FAILED = "lowering failed"
UNKNOWN_WORKLOAD = "unknown workload"
UNUSABLE_TARGET = "unusable target"


@dataclasses.dataclass(frozen=True)
class FeaturizeConfig:
    """Options of one featurizer run (see the module docstring).

    Args:
        records: database folders or record trees.
        out: shard folder (created).
        workers: worker processes (1 = in this process).
        shard_index: this process's share of the groups (with num_shards).
        num_shards: number of independent processes sharing the groups.
        tasks_per_shard: tasks per group / shard file.
        failed: "drop" failed measurements or keep them with label 0 ("zero").
        network: the network the records of bare databases (tuning work dirs) belong to.
        overwrite: delete shards in `out` that this run would not write (other records or options)
            instead of refusing to run.
    """

    records: tuple[str, ...]
    out: str
    workers: int = 1
    shard_index: int = 0
    num_shards: int = 1
    tasks_per_shard: int = 16
    failed: str = "zero"
    network: str | None = None
    overwrite: bool = False

    def __post_init__(self) -> None:
        if not self.records:
            raise ValueError("records: give at least one database folder or record tree")
        if self.workers < 1:
            raise ValueError(f"--workers {self.workers}: must be >= 1")
        if self.num_shards < 1 or not 0 <= self.shard_index < self.num_shards:
            raise ValueError(f"--shard-index {self.shard_index} --num-shards {self.num_shards}: need 0 <= index < n")
        if self.tasks_per_shard < 1:
            raise ValueError(f"--tasks-per-shard {self.tasks_per_shard}: must be >= 1")
        if self.failed not in FAILED_POLICIES:
            raise ValueError(f"--failed {self.failed!r}: expected one of {FAILED_POLICIES}")
        if self.network is not None and (not self.network or "," in self.network):
            raise ValueError(f"--network {self.network!r}: give one network name without commas")
        if Path(self.out).exists() and not Path(self.out).is_dir():
            raise ValueError(f"--out {self.out!r}: exists and is not a folder")


@dataclasses.dataclass
class _TaskArrays:
    """Features of the kept records of one task (rows per record as lists of arrays)."""

    task: Task
    tags: np.ndarray
    flops: float
    records: list[Record]
    stmt: list[np.ndarray]
    access: list[np.ndarray]
    psa: list[np.ndarray]
    gemm: list[np.ndarray]
    gemm_found: list[bool]


def featurize_task(task: Task, summary: ReadSummary, *, stmt: bool = True, walk: bool = True) -> _TaskArrays:
    """Replay every record of `task` on its workload and featurize it.

    Records whose trace no longer applies, or whose schedule does not lower, are left out and
    counted in `summary` with their file:line. `stmt` / `walk` select the parts (the benchmark
    times PerStoreFeature alone with walk=False).
    """
    import tvm_env
    from data import features
    from tvm_env import ms, tvm

    out = _TaskArrays(task, np.zeros(TAG_DIM, np.float32), task.flops, [], [], [], [], [], [])
    target_json = task.target or task.records[0].target
    try:
        target = tvm_env.parse_target(target_json) if target_json else "no target in index.json or in the record"
    except Exception as err:
        target = f"target {target_json!r} does not parse: {_first_line(err)}"
    if isinstance(target, str):
        for record in task.records:
            summary.add(UNUSABLE_TARGET, record.source, f"task {task.key}: {target}")
        return out
    tvm_env.setup(target)
    modules: dict[str, tvm.IRModule | Exception] = {}
    kept: list[Record] = []
    candidates = []
    for record in task.records:
        shash = record.workload.shash
        if shash not in modules:
            try:
                modules[shash] = ms.database.Workload.from_json(record.workload.as_json()).mod
            except Exception as err:
                modules[shash] = err
        wl_mod = modules[shash]
        if isinstance(wl_mod, Exception):
            summary.add(
                UNKNOWN_WORKLOAD,
                record.source,
                f"workload {record.workload.source} does not decode: {_first_line(wl_mod)}",
            )
            continue
        sch = tvm.s_tir.Schedule(wl_mod)
        try:
            tvm.s_tir.schedule.Trace.apply_json_to_schedule(record.trace, sch)
        except Exception as err:
            summary.add(TRACE_FAILED, record.source, _first_line(err))
            continue
        kept.append(record)
        candidates.append(ms.MeasureCandidate(sch, ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True)))
    mod = next((m for m in modules.values() if not isinstance(m, Exception)), None)
    if mod is None:
        return out
    out.tags = features.workload_tags(mod)
    if not out.flops:
        try:
            out.flops = float(tvm.s_tir.analysis.estimate_tir_flops(mod))
        except Exception:
            out.flops = 0.0
    context = ms.TuneContext(mod=mod, target=target, num_threads=1)
    failed: dict[int, Exception] = {}
    feats = features.featurize_candidates(context, candidates, stmt=stmt, walk=walk, on_error=failed.__setitem__)
    for i, (record, f) in enumerate(zip(kept, feats)):
        if f is None:
            summary.add(LOWERING_FAILED, record.source, _first_line(failed[i]))
            continue
        if not walk:
            f = features.ProgramFeatures.empty(f.stmt)
        out.records.append(record)
        out.stmt.append(f.stmt if f.stmt is not None else np.zeros((0, STMT_DIM), np.float32))
        out.access.append(f.access)
        out.psa.append(f.psa)
        out.gemm.append(f.gemm)
        out.gemm_found.append(f.gemm_found)
    return out


def _first_line(err: BaseException) -> str:
    """A one-line reason: TVM's "Error message:" line when there is one, else the first line."""
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    detail = next((line for line in lines if line.startswith("Error message:")), lines[0] if lines else "")
    return f"{type(err).__name__}: {detail}"[:300]


def _csr(parts: list[np.ndarray], width: int) -> tuple[np.ndarray, np.ndarray]:
    ptr = np.zeros(len(parts) + 1, np.int64)
    ptr[1:] = np.cumsum([len(p) for p in parts])
    rows = np.concatenate(parts).astype(np.float32) if parts else np.zeros((0, width), np.float32)
    return ptr, rows.reshape(-1, width)


def _shard_data(tasks: list[_TaskArrays]) -> ShardData:
    """Assemble the shard arrays; labels are computed per task over its kept records."""
    from data.labels import normalized_throughput

    tasks = [t for t in tasks if t.records]
    records = [r for t in tasks for r in t.records]
    latency = np.array([r.latency for r in records], np.float64)
    record_task = np.repeat(np.arange(len(tasks)), [len(t.records) for t in tasks]).astype(np.int64)
    label = np.zeros(len(records), np.float32)
    for i in range(len(tasks)):
        sel = record_task == i
        label[sel] = normalized_throughput(latency[sel])
    stmt_ptr, stmt = _csr([s for t in tasks for s in t.stmt], STMT_DIM)
    access_ptr, access = _csr([a for t in tasks for a in t.access], ACCESS_DIM)
    psa_ptr, psa = _csr([p for t in tasks for p in t.psa], PSA_DIM)
    gemm = [g for t in tasks for g in t.gemm]
    return ShardData(
        task_key=np.array([t.task.key for t in tasks], dtype=np.str_),
        task_name=np.array([t.task.name for t in tasks], dtype=np.str_),
        task_networks=np.array([",".join(t.task.networks) for t in tasks], dtype=np.str_),
        task_target=np.array(
            [json.dumps(t.task.target or t.records[0].target, sort_keys=True) for t in tasks], dtype=np.str_
        ),
        task_weight=np.array([t.task.weight for t in tasks], np.float64),
        task_network_weights=np.array(
            [json.dumps(t.task.network_weights, sort_keys=True) for t in tasks], dtype=np.str_
        ),
        task_flops=np.array([t.flops for t in tasks], np.float64),
        task_tags=np.array([t.tags for t in tasks], np.float32).reshape(-1, TAG_DIM),
        record_task=record_task,
        record_source=np.array([r.source for r in records], dtype=np.str_),
        latency=latency,
        label=label,
        stmt_ptr=stmt_ptr,
        stmt=stmt,
        access_ptr=access_ptr,
        access=access,
        psa_ptr=psa_ptr,
        psa=psa,
        gemm=np.array(gemm, np.float32).reshape(-1, GEMM_ROWS, ACCESS_DIM),
        gemm_found=np.array([f for t in tasks for f in t.gemm_found], bool),
    )


def _digest(tasks: Sequence[Task], failed: str) -> str:
    """Fingerprint of a group's inputs and options: a shard is reused only if it matches."""
    h = hashlib.sha256(f"failed={failed}".encode())
    for task in tasks:
        h.update(
            json.dumps([task.key, task.name, task.network_weights, task.flops, task.target], sort_keys=True).encode()
        )
        for r in task.records:
            h.update(json.dumps([r.source, r.workload.shash, r.trace, r.run_secs], sort_keys=True).encode())
    return h.hexdigest()


@dataclasses.dataclass(frozen=True)
class _Group:
    index: int
    path: str
    digest: str
    tasks: tuple[Task, ...]

    @property
    def num_records(self) -> int:
        return sum(len(t.records) for t in self.tasks)


def plan_groups(tasks: dict[str, Task], cfg: FeaturizeConfig, *, everyone: bool = False) -> list[_Group]:
    """Tasks sorted by key, cut into groups of `tasks_per_shard`; this process's share of them
    (every process's with `everyone`: what the folder holds once all processes are done)."""
    keys = sorted(tasks)
    groups = []
    for g, start in enumerate(range(0, len(keys), cfg.tasks_per_shard)):
        if not everyone and g % cfg.num_shards != cfg.shard_index:
            continue
        members = tuple(tasks[k] for k in keys[start : start + cfg.tasks_per_shard])
        groups.append(_Group(g, str(Path(cfg.out) / f"shard-{g:05d}.h5"), _digest(members, cfg.failed), members))
    return groups


def _inputs(cfg: FeaturizeConfig, plan: Sequence[_Group]) -> dict:
    """What the manifest records about the run that made the folder (its inputs and options)."""
    return {
        "records": [str(Path(r).resolve()) for r in cfg.records],
        "failed": cfg.failed,
        "tasks_per_shard": cfg.tasks_per_shard,
        "network": cfg.network,
        "num_tasks": sum(len(g.tasks) for g in plan),
        "num_records": sum(g.num_records for g in plan),
    }


def _clear_stale(out: Path, plan: Sequence[_Group], overwrite: bool) -> list[Path]:
    """Shard files in `out` that the plan does not name (made from other records or another
    --tasks-per-shard): refused, or deleted with `overwrite`. Planned files made from other inputs
    are rebuilt by the run anyway (their stored digest differs).

    Raises:
        ValueError: stale shards are present and `overwrite` is off (nothing is written then).
    """
    planned = {Path(g.path).name for g in plan}
    stale = [p for p in list_shards(out) if p.name not in planned]
    if stale and not overwrite:
        names = ", ".join(p.name for p in stale[:3]) + (" ..." if len(stale) > 3 else "")
        raise ValueError(
            f"--out {str(out)!r} holds {len(stale)} shard file(s) this run would not write ({names}): they were "
            "made from other records or another --tasks-per-shard. Featurize into an empty folder, or add "
            "--overwrite to delete them and rebuild"
        )
    for path in stale:
        path.unlink()
    return stale


def _is_done(group: _Group) -> bool:
    if not Path(group.path).exists() or not shard_is_valid(group.path):
        return False
    try:
        return read_shard_attrs(group.path).get("input_digest") == group.digest
    except ShardError:
        return False


def _run_group(group: _Group, failed: str) -> ReadSummary:
    """Featurize and write one group (runs in a worker process)."""
    import tvm

    summary = ReadSummary()
    arrays = [featurize_task(task, summary) for task in group.tasks]
    attrs = {
        "created_by": "pruner-lightning data.featurize",
        "tvm_version": tvm.__version__,
        "featurizer": {
            "failed": failed,
            "per_store_feature": {
                "buffers_per_store": 5,
                "arith_intensity_curve_num_samples": 10,
                "cache_line_bytes": 64,
            },
            "lowering": "PerStoreFeature pass list (data.features)",
        },
        "input_digest": group.digest,
        "group": group.index,
        "tasks": [t.key for t in group.tasks],
    }
    write_shard(group.path, _shard_data(arrays), attrs)
    return summary


def same_workload_tasks(tasks: dict[str, Task]) -> list[list[str]]:
    """Groups of two or more task keys that hold one workload (structural hash) on one device: the
    same workload read under two folder names (two trees, a tuning work dir beside a tree) is two
    tasks, each with its own labels, which a hold-out split can put on both of its sides."""
    keys: dict[tuple[str, str], list[str]] = {}
    for key, task in tasks.items():
        for shash in sorted({r.workload.shash for r in task.records}):
            keys.setdefault((key.split("/", 1)[0], shash), []).append(key)
    return [group for group in keys.values() if len(group) > 1]


def featurize(cfg: FeaturizeConfig) -> ReadSummary:
    """Run the featurizer; returns the merged record summary (also printed by `main`)."""
    out = Path(cfg.out)
    record_set = read_records(cfg.records, failed=cfg.failed, network=cfg.network)
    summary = record_set.summary
    for group in same_workload_tasks(record_set.tasks):
        print(
            f"warning: tasks {', '.join(group)} hold one workload: each is a task of its own, with its own "
            "labels, and a split by network can put one in training and another in the test set; to make "
            "them one task, give their records one task folder",
            file=sys.stderr,
        )
    plan = plan_groups(record_set.tasks, cfg, everyone=True)
    groups = [g for g in plan if g.index % cfg.num_shards == cfg.shard_index]
    out.mkdir(parents=True, exist_ok=True)
    removed = _clear_stale(out, plan, cfg.overwrite)
    rebuilt = [g for g in groups if Path(g.path).exists() and not _is_done(g)]
    todo = [g for g in groups if not _is_done(g)]
    done_records = sum(g.num_records for g in groups if g not in todo)
    print(
        f"{len(record_set.tasks)} tasks, {summary.kept} records -> {len(groups)} shards for this process "
        f"({len(groups) - len(todo)} already done)",
        file=sys.stderr,
    )
    if removed or rebuilt:
        print(
            f"--out {str(out)!r}: {len(removed)} stale shard(s) deleted (--overwrite), {len(rebuilt)} rebuilt "
            "(made from other records or options, or unfinished)",
            file=sys.stderr,
        )
    bar = tqdm(total=sum(g.num_records for g in groups), initial=done_records, unit="rec", desc="featurize")
    try:
        if cfg.workers == 1 or len(todo) <= 1:
            for group in todo:
                summary.merge(_run_group(group, cfg.failed))
                bar.update(group.num_records)
        else:
            ctx = multiprocessing.get_context("spawn")  # TVM's thread pools do not survive fork
            with ctx.Pool(min(cfg.workers, len(todo)), initializer=_quiet_worker) as pool:
                for part, n in pool.imap_unordered(_run_group_counted, [(g, cfg.failed) for g in todo]):
                    summary.merge(part)
                    bar.update(n)
    finally:
        bar.close()
        write_manifest(out, inputs=_inputs(cfg, plan), expected={Path(g.path).name: g.digest for g in plan})
    return summary


def featurize_in_memory(
    records: Sequence[str], *, stmt: bool = True, workers: int = 1, failed: str = "zero"
) -> tuple[ShardData, ReadSummary]:
    """The shard data of `records` (database folders or record trees), computed and not written: for
    studies that need part of the features. With `stmt=False` it skips PerStoreFeature, the most of
    the featurizer's time, and the data's statement rows are empty (the PSA rows, access records and
    GEMM matrices are the featurizer's own). Tasks in key order, spread over `workers` processes."""
    if workers < 1:
        raise ValueError(f"workers={workers}: must be >= 1")
    record_set = read_records(records, failed=failed)
    tasks = [record_set.tasks[key] for key in sorted(record_set.tasks)]
    summary = record_set.summary
    jobs = [(task, stmt) for task in tasks]
    if workers == 1 or len(tasks) <= 1:
        parts = [_task_arrays(job) for job in jobs]
    else:
        with multiprocessing.get_context("spawn").Pool(min(workers, len(tasks)), initializer=_quiet_worker) as pool:
            parts = list(pool.imap(_task_arrays, jobs))
    for _, part in parts:
        summary.merge(part)
    return _shard_data([arrays for arrays, _ in parts]), summary


def _task_arrays(job: tuple[Task, bool]) -> tuple[_TaskArrays, ReadSummary]:
    summary = ReadSummary()
    return featurize_task(job[0], summary, stmt=job[1]), summary


def _run_group_counted(args: tuple[_Group, str]) -> tuple[ReadSummary, int]:
    return _run_group(*args), args[0].num_records


def _quiet_worker() -> None:
    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)


def _parser() -> ArgumentParser:
    """The CLI (jsonargparse: `--config FILE`, `--print_config`, defaults in --help)."""
    defaults = {f.name: f.default for f in dataclasses.fields(FeaturizeConfig)}
    p = ArgumentParser(prog="python -m data.featurize", description=__doc__.split("\n\n")[0], exit_on_error=True)
    p.add_argument("--config", action=ActionConfigFile, help="a YAML/JSON file of these options")
    p.add_argument(
        "records",
        nargs="+",
        type=str,
        help="database folders (tuning work dirs) or TenSet-style trees (ROOT or ROOT/<device>)",
    )
    p.add_argument("--out", required=True, type=str, help="shard folder (created)")
    p.add_argument("--workers", type=int, default=defaults["workers"], help="worker processes")
    p.add_argument(
        "--shard-index", type=int, default=defaults["shard_index"], help="this process's share (with --num-shards)"
    )
    p.add_argument(
        "--num-shards", type=int, default=defaults["num_shards"], help="independent processes sharing the work"
    )
    p.add_argument("--tasks-per-shard", type=int, default=defaults["tasks_per_shard"], help="tasks per shard file")
    p.add_argument(
        "--failed",
        choices=FAILED_POLICIES,
        default=defaults["failed"],
        help="failed measurements: drop, or keep with label 0",
    )
    p.add_argument(
        "--network",
        type=str | None,
        default=None,
        help="network that the records of bare databases (tuning work dirs without an index.json) belong to",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="delete shards in --out that this run would not write, instead of refusing to run",
    )
    return p


def main(argv: Sequence[str] | None = None) -> ReadSummary:
    """Parse, featurize, print the record summary. Bad arguments and unusable inputs exit 2 with an
    `error:` line (no traceback)."""
    parser = _parser()
    args = parser.parse_args(None if argv is None else [str(a) for a in argv])
    try:
        cfg = FeaturizeConfig(
            tuple(args.records),
            args.out,
            args.workers,
            args.shard_index,
            args.num_shards,
            args.tasks_per_shard,
            args.failed,
            args.network,
            args.overwrite,
        )
        summary = featurize(cfg)
    except (ValueError, ShardError) as err:
        parser.error(str(err))
    print(summary.format())
    return summary


if __name__ == "__main__":
    main()
