"""Build a TenSet-style dataset: N distinct random schedules per task, built and measured.

`python -m data.collect --target '{"kind": "llvm", "mcpu": "native", "num-cores": 2}'
--network resnet_50 --workload matmul:512,512,512 --per-task 64 --out datasets`

Why one module of about 800 lines: planning, resuming, committing and the CLI of a collection run
share its state (the plan, the per-task databases, the index, the stop flag). The parts that do not
are elsewhere: drawing schedules in `data.sampler`, building and running in `data.measure`, the
loop that overlaps sampling, building, running and committing in `data.collect_pipeline`, the
record-tree layout in `data.record_tree`, the networks in `data.zoo`, the check of a database line by
line in `data.database_check`.

Layout (docs/architecture.md, "TenSet-style record tree"; paths, index.json and task-folder names in
`data.record_tree`)::

    ROOT/<device>/index.json
    ROOT/<device>/<task_dir>/database_workload.json[.xz]
    ROOT/<device>/<task_dir>/database_tuning_record.json[.xz]

Schedules are drawn as the removed `dataset_sample_candidates.py` did: MetaSchedule's evolutionary
search with a `RandomModel` (`data.sampler`), so the data covers the design space rather than the
good corner a tuner would visit. Every measured candidate is stored, failures with
`run_secs = [1e10]` (MetaSchedule's convention), so the data keeps them.

Sampling, building and running overlap (`data.collect_pipeline`): the next tasks are sampled while
chunks of candidates build on every core and built chunks run, one runner per GPU (or per RPC
server). Each run adds an entry to index.json's "collections" list: how it measured (evaluator
settings, build workers, runners, TVM version, date; on NVIDIA machines the GPUs' clocks and power
limit) and how many records it stored (`data.measure.measurement_settings`).

Long runs are safe to interrupt: records are committed to the task's JSONDatabase after each
measured chunk, and a rerun skips tasks that have `--per-task` records, tops up partial ones with
new distinct schedules (never re-measuring one already stored), and rewrites `index.json`
atomically after each chunk.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import lzma
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from jsonargparse import ArgumentParser
from tqdm import tqdm
from tvm.s_tir.meta_schedule.utils import _json_de_tvm

from data.collect_pipeline import StageTimes, map_ahead, measure_pipelined, measure_sequential
from data.database_check import check, load
from data.features.cache import schedule_keys
from data.labels import mean_latency
from data.measure import measurement_settings, runner_count
from data.record_tree import (
    DB_FILES,
    INDEX,
    IndexFileError,
    add_task,
    index_weights,
    is_database,
    json_rows,
    new_index,
    read_index,
    stored_workload,
    write_database_file,
    write_index,
)
from data.replay import replay_records
from data.sampler import sample_schedules
from data.zoo import (
    NETWORKS,
    TaskSpec,
    check_network,
    extract_networks,
    operator_task,
    select_tasks,
)
from tvm_env import (
    is_gpu,
    ms,
    parse_target,
    setup,
    target_device_name,
    tvm,
    usable_cores,
)

__all__ = ["CollectConfig", "TaskPlan", "collect", "count_records", "main", "plan_tasks", "sample_schedules"]


@dataclasses.dataclass
class CollectConfig:
    """What to collect and how to measure it.

    Args:
        target: a tag ("nvidia/nvidia-h100") or a JSON dict string / dict.
        out: dataset root; records go under `out/<device>/`.
        networks: zoo network names (`data.zoo.NETWORKS`).
        ops: operator specs (`data.zoo.operator_task`), e.g. "matmul:512,512,512".
        per_task: distinct schedules to store per task.
        seed: base random seed of the sampler (combined with the records already stored, so top-ups
            explore new schedules).
        batch_size: candidates built and run per chunk (one database commit per chunk); None: 2x the
            build workers when runs overlap builds, else 128.
        builder_workers: parallel build processes.
        timeout: seconds allowed for one build and for one run.
        max_source_kb: CUDA kernels with more generated source than this are not built (refused before
            NVRTC, `tvm_env.nvrtc`), not measured and not stored; None: no limit. NVRTC's time grows
            with the source: kernels over 512 KB were 6% of random H100 schedules and 28% of the
            build time (benchmarks/build_profile.py).
        runner: "local" (LocalRunner on this machine) or "rpc" (RPCRunner through a tracker).
        tracker: "host:port" of the TVM RPC tracker (runner "rpc").
        key: device key registered at the tracker (runner "rpc").
        runners: runs measured in parallel; None: one per visible CUDA GPU (local), one session per
            server registered for the key (rpc), one on a CPU target.
        sequential: the first way of collecting (sample, then build a batch, then run it); for
            comparison (benchmarks/collect_speed.py). Default: sampling, building and running overlap.
        overlap_runs: run while builds and sampling go on; None: yes for GPU and RPC targets, no for
            a CPU measured on this machine (its timings would be taken on cores busy compiling).
        repeat: measurements per candidate (its `run_secs` has this many entries).
        min_repeat_ms: minimum duration of one measurement; short kernels are run more times.
        max_tasks: keep at most this many tasks per network (the heaviest by weight x FLOPs).
        min_flops: drop network tasks below this many FLOPs.
        max_flops: drop network tasks above this many FLOPs.
        size: input size of the networks (image side / sequence length); None for the standard.
        population: population size of the sampler's evolutionary search.
        samplers: tasks sampled at once, ahead of the builds (threads; each sampler's evolution
            uses every core). Used when runs overlap builds; quiet runs and `sequential` sample one
            task at a time.
        min_schedules: skip tasks whose design space holds fewer distinct schedules (they carry
            no ranking signal); skipped tasks are noted in index.json and not retried.
        compress: xz-compress the database files of every finished task (`.json.xz`).
        extract_workers: networks whose tasks are extracted at once, each in its own process; None:
            one per network up to half the CPU count; 1: one after the other in this process.
        top_up: plan the tasks already in the tree's index.json instead of extracting networks (no
            torch export or relax passes: 100-120 s of a 16-core GPU call for ten networks): those
            of `networks` (each must be in the index), or all of them when `networks` is empty.
            `max_tasks`, `min_flops`, `max_flops` and `size` do not apply; `ops` are added as usual.
        plan_only: extract and plan the tasks, write each one's workload (no records) and list it in
            index.json, then stop: a CPU host does the extraction, and a later `top_up` run on the
            GPU machine measures the tasks without paying for it.
    """

    target: str | dict
    out: str
    networks: Sequence[str] = ()
    ops: Sequence[str] = ()
    per_task: int = 64
    seed: int = 0
    batch_size: int | None = None
    builder_workers: int | None = None
    timeout: float = 60.0
    max_source_kb: float | None = None
    runner: str = "local"
    tracker: str | None = None
    key: str | None = None
    runners: int | None = None
    sequential: bool = False
    overlap_runs: bool | None = None
    repeat: int = 3
    min_repeat_ms: int = 20
    max_tasks: int | None = None
    min_flops: float = 0.0
    max_flops: float | None = None
    size: int | None = None
    population: int = 64
    samplers: int = 2
    min_schedules: int = 8
    compress: bool = False
    deadline: float | None = None
    extract_workers: int | None = None
    top_up: bool = False
    plan_only: bool = False

    def __post_init__(self) -> None:
        if not self.networks and not self.ops and not self.top_up:
            raise ValueError("nothing to collect: give --network and/or --workload, or --top-up")
        for network in () if self.top_up else self.networks:
            check_network(network)  # a zoo name or an existing own-model file, else it says which
        for name in ("per_task", "batch_size", "repeat", "runners", "builder_workers", "samplers", "extract_workers"):
            if getattr(self, name) is not None and getattr(self, name) <= 0:
                raise ValueError(f"{name}={getattr(self, name)!r} must be positive")
        if self.population < 50:
            raise ValueError(f"population={self.population!r} must be >= 50 (MetaSchedule's init_min_unmeasured)")
        if self.timeout <= 0:
            raise ValueError(f"timeout={self.timeout!r} must be positive")
        if self.max_source_kb is not None and not self.max_source_kb > 0:
            raise ValueError(f"max_source_kb={self.max_source_kb!r} must be positive (KB), or unset for no limit")
        if self.deadline is not None and self.deadline <= 0:
            raise ValueError(f"deadline={self.deadline!r} must be positive (seconds)")
        if self.runner not in ("local", "rpc"):
            raise ValueError(f"runner={self.runner!r} must be 'local' or 'rpc'")
        if self.runner == "rpc":
            if not self.key or not self.tracker or ":" not in self.tracker:
                raise ValueError(
                    f"runner 'rpc' needs --tracker host:port and --key (got {self.tracker!r}, {self.key!r})"
                )


@dataclasses.dataclass
class TaskPlan:
    """A task to collect and the networks that use it (name -> weight)."""

    spec: TaskSpec
    task_dir: str
    networks: dict[str, int]


@dataclasses.dataclass
class TaskResult:
    """What one task's collection did: records before, newly measured, and the outcome."""

    task_dir: str
    before: int
    new: int = 0
    valid: int = 0
    failed: int = 0
    refused: int = 0  # sampled, but over --max-source-kb: not built, not stored
    status: str = "complete"  # complete | exhausted | skipped: <reason> | interrupted


# ----------------------------------------------------------------------------------------------
# Files
# ----------------------------------------------------------------------------------------------


def count_records(task_path: Path) -> tuple[int, int]:
    """(records, valid records) stored in a task directory (plain or xz).

    Raises:
        ValueError: a record line that is not UTF-8 JSON, naming the file and line.
    """
    total = valid = 0
    path = task_path / DB_FILES[1]
    if not path.exists():
        path = path.with_name(path.name + ".xz")
        if not path.exists():
            return 0, 0
    for lineno, _, row in json_rows(path, "tuning record"):
        try:
            run_secs = row[1][1]
        except (IndexError, TypeError) as err:
            raise ValueError(f"{path}:{lineno}: malformed tuning record ({err})") from None
        total += 1
        valid += mean_latency(run_secs) != float("inf")
    return total, valid


def _set_compressed(task_path: Path, compressed: bool) -> None:
    """Convert a task's two database files to `.json.xz` (True) or back to plain `.json` (False)."""
    for name in DB_FILES:
        plain, packed = task_path / name, task_path / (name + ".xz")
        if compressed and plain.exists():
            write_database_file(task_path, name, plain.read_bytes(), compressed=True)
        elif not compressed and packed.exists():
            write_database_file(task_path, name, lzma.decompress(packed.read_bytes()), compressed=False)


def _task_database(task_path: Path) -> ms.database.JSONDatabase:
    """A task folder's MetaSchedule database over its two plain files (created if missing).

    Raises:
        ValueError: a line TVM cannot load (a record whose trace does not replay on its workload, as
            one stored by another TVM version; an empty line), as "<file>:<line>: ..." (`data.database_check`).
    """
    paths = [task_path / f for f in DB_FILES]
    database, why = load(*paths)
    if database is not None:
        return database
    problems = check(*paths).problems
    where = problems[0] if problems else f"{task_path}: the task's database does not load ({why})"
    raise ValueError(f"{where}; the task's records are kept as they are (move its folder aside to collect it afresh)")


def _target_json(target: tvm.target.Target) -> dict:
    return json.loads(json.dumps(_json_de_tvm(target.export())))


def _load_index(device_path: Path, target: tvm.target.Target) -> dict:
    try:
        index = read_index(device_path)
    except IndexFileError as err:
        raise ValueError(f"{err}; move it aside to start a new index") from None
    if index is None:
        return new_index(_target_json(target))
    if index.get("target") != _target_json(target):
        raise ValueError(
            f"{device_path / 'index.json'}: collected for target {index.get('target')!r}, not {_target_json(target)!r}"
        )
    return index


def _update_index(index: dict, plans: Sequence[TaskPlan], stored: set[str], skipped: dict[str, str]) -> None:
    """List the planned tasks that have records on disk (`stored`: their folders; kept by the caller,
    since recounting every task's compressed files at each commit took 10% of a top-up call); note
    the skipped ones with their reason."""
    for plan in plans:
        if plan.task_dir in skipped:
            index["skipped"][plan.task_dir] = skipped[plan.task_dir]
            continue
        if plan.task_dir not in stored:
            continue
        spec = plan.spec
        add_task(index, plan.task_dir, spec.name, spec.flops, spec.workload_hash, plan.networks)


# ----------------------------------------------------------------------------------------------
# Planning, sampling, measuring
# ----------------------------------------------------------------------------------------------


def _indexed_tasks(device_path: Path, index: dict, networks: Sequence[str]) -> list[tuple[str | None, list[TaskSpec]]]:
    """(network, its tasks) for the tasks already in a tree's index (`CollectConfig.top_up`): those of
    `networks`, or every indexed task (as network None) when it is empty. Each module is read back
    from its folder's workload file and checked against the index's hash."""
    weights = index_weights(index)
    known = {n for w in weights.values() for n in w}
    missing = [n for n in networks if n not in known]
    if missing:
        raise ValueError(f"{device_path / INDEX}: no tasks of network(s) {', '.join(missing)} to top up")

    def spec(folder: str, weight: int) -> TaskSpec:
        meta = index["tasks"][folder]
        mod = ms.database.Workload.from_json(stored_workload(device_path / folder)).mod
        task = TaskSpec.from_mod(meta["name"], mod, weight)
        if task.workload_hash != meta["workload_hash"]:
            raise ValueError(
                f"{device_path / folder}: workload hash {task.workload_hash} is not the index's {meta['workload_hash']}"
            )
        return task

    if not networks:
        return [(None, [spec(folder, 1) for folder in sorted(index["tasks"])])]
    return [
        (net, [spec(d, int(w[net])) for d, w in sorted(weights.items()) if net in w and d in index["tasks"]])
        for net in dict.fromkeys(networks)
    ]


def plan_tasks(
    cfg: CollectConfig,
    target: tvm.target.Target,
    known: dict | None = None,
    device_path: Path | None = None,
    index: dict | None = None,
) -> list[TaskPlan]:
    """Extract and dedupe the tasks of `cfg.networks` and `cfg.ops` (with `cfg.top_up`: read the
    networks' tasks from `index`, the index of `device_path`, instead of extracting them).

    A workload shared by several networks (same structural hash) is one task; it keeps the
    directory it already has in `known` (an index's "tasks"), else the first name seen.
    """
    by_hash: dict[str, TaskPlan] = {}
    dir_of_hash = {v["workload_hash"]: d for d, v in (known or {}).items()}
    sources: list[tuple[str | None, list[TaskSpec]]] = []
    if cfg.top_up:
        if device_path is None:
            raise ValueError("top_up plans from a tree: give device_path")
        sources += _indexed_tasks(device_path, index or {"tasks": {}, "networks": {}}, cfg.networks)
    else:
        extracted = extract_networks(list(dict.fromkeys(cfg.networks)), target, cfg.size, cfg.extract_workers)
        for net in cfg.networks:
            sources.append((net, select_tasks(extracted[net], cfg.max_tasks, cfg.min_flops, cfg.max_flops)))
    sources.append((None, [operator_task(spec) for spec in cfg.ops]))
    for net, tasks in sources:
        for spec in tasks:
            plan = by_hash.get(spec.workload_hash)
            if plan is None:
                task_dir = dir_of_hash.get(spec.workload_hash, spec.task_dir)
                plan = by_hash[spec.workload_hash] = TaskPlan(spec, task_dir, {})
            if net is not None:
                plan.networks[net] = plan.networks.get(net, 0) + spec.weight
    return list(by_hash.values())


@dataclasses.dataclass
class _TaskRun:
    """A task being topped up: its open database and how many of its candidates await measuring."""

    plan: TaskPlan
    path: Path
    db: ms.database.JSONDatabase
    workload: ms.database.Workload
    result: TaskResult
    pending: int


def _stored_keys(db: ms.database.JSONDatabase, task_path: Path) -> set[int]:
    """The schedule keys of a task's stored records, not to be sampled again, replayed on every core
    (each record replays: the database would not have opened otherwise, `_task_database`)."""
    candidates = replay_records(db.get_all_tuning_records(), usable_cores())
    for candidate in candidates:
        if isinstance(candidate, Exception):  # not expected (the load replayed it): a missing key could store a twin
            raise ValueError(f"{task_path}: a stored record does not replay ({candidate})")
    return set(schedule_keys([c.sch.mod for c in candidates]))


def _start_task(
    plan: TaskPlan, cfg: CollectConfig, target: tvm.target.Target, task_path: Path, result: TaskResult
) -> list[tuple[_TaskRun, tvm.s_tir.Schedule]]:
    """Sample the schedules that top `task_path` up to `cfg.per_task` records (none if it is full).

    Sets `result.status` to "skipped: <reason>" when the design space cannot be sampled or holds
    fewer than `cfg.min_schedules` distinct schedules (reshapes, copies: nothing to rank), and to
    "exhausted" when it holds fewer new distinct schedules than wanted.
    """
    want = cfg.per_task - result.before
    if want <= 0:
        if cfg.compress:
            _set_compressed(task_path, True)
        return []
    stored: set[int] = set()
    db = None  # the task's database, opened once: its records' keys now, the run's commits later
    compressed = (task_path / (DB_FILES[1] + ".xz")).exists()
    _set_compressed(task_path, False)  # also a planned task's workload file (`CollectConfig.plan_only`)
    if result.before:
        try:
            db = _task_database(task_path)
            stored = _stored_keys(db, task_path)
        except ValueError:
            if compressed:  # the task's files go back as they came
                _set_compressed(task_path, True)
            raise
    try:
        seed = cfg.seed * 1_000_003 + result.before
        schedules = sample_schedules(plan.spec, target, want, seed, stored, population=cfg.population)
    except Exception as err:  # TVM raises plain errors; the task is skipped, not the run
        if _interrupted:
            raise KeyboardInterrupt from err
        result.status = f"skipped: {str(err).strip().splitlines()[-1][:200]}"
        return []
    if len(schedules) < want and result.before + len(schedules) < cfg.min_schedules:
        result.status = f"skipped: only {result.before + len(schedules)} distinct schedules (< --min-schedules)"
        return []
    if len(schedules) < want:
        result.status = "exhausted"
    if not schedules:
        return []
    if db is None:
        task_path.mkdir(parents=True, exist_ok=True)
        db = _task_database(task_path)
    run = _TaskRun(plan, task_path, db, db.commit_workload(plan.spec.mod), result, len(schedules))
    return [(run, sch) for sch in schedules]


def _plan_only(
    cfg: CollectConfig, plans: Sequence[TaskPlan], results: list[TaskResult], device_path: Path, index: dict
) -> list[TaskResult]:
    """Write the workload of every planned task that has no folder yet and list all of them in the
    index, so that `top_up` finds them (`CollectConfig.plan_only`)."""
    for plan, res in zip(plans, results):
        task_path = device_path / plan.task_dir
        if not res.before and not is_database(task_path):
            task_path.mkdir(parents=True, exist_ok=True)
            _task_database(task_path).commit_workload(plan.spec.mod)
            if cfg.compress:
                _set_compressed(task_path, True)
        res.status = "planned"
    _update_index(index, plans, {p.task_dir for p in plans}, {})
    write_index(device_path, index)
    return results


def collect(cfg: CollectConfig, times: StageTimes | None = None) -> list[TaskResult]:
    """Collect every planned task of `cfg`; returns one result per task (see `main` for the summary).

    Candidates of consecutive tasks share build/run chunks (`cfg.batch_size`), measured by
    `data.collect_pipeline` (pipelined, or `cfg.sequential`); each chunk is committed to its tasks'
    databases, and index.json rewritten, as soon as it is measured. `times` (if given) is filled
    with where the time went.
    """
    times = times if times is not None else StageTimes()
    end = time.monotonic() + cfg.deadline if cfg.deadline else float("inf")  # task extraction counts too
    target = parse_target(cfg.target)
    setup(target)
    device_path = Path(cfg.out) / target_device_name(target)
    device_path.mkdir(parents=True, exist_ok=True)
    index = _load_index(device_path, target)
    plans = plan_tasks(cfg, target, index["tasks"], device_path, index)
    results = [TaskResult(p.task_dir, count_records(device_path / p.task_dir)[0]) for p in plans]
    if cfg.plan_only:
        return _plan_only(cfg, plans, results, device_path, index)
    stored = {r.task_dir for r in results if r.before}  # tasks with records on disk
    skipped: dict[str, str] = {}
    reached: set[str] = set()  # tasks the sampler got to
    runs: list[_TaskRun] = []  # tasks with sampled schedules
    overlap = cfg.overlap_runs if cfg.overlap_runs is not None else (cfg.runner == "rpc" or is_gpu(target))
    # tasks sampled at once: quiet runs (no overlap) and the sequential way sample one task at a time
    samplers = 1 if cfg.sequential or not overlap else cfg.samplers
    settings: dict | None = None  # this run's entry in index["collections"], added at its first commit

    def stopping() -> bool:
        return _stop_requested or time.monotonic() > end

    def sample(plan: TaskPlan, res: TaskResult) -> list[tuple[_TaskRun, tvm.s_tir.Schedule]] | None:
        """One task's sampled schedules (runs `samplers` tasks ahead, on threads); None once stopping."""
        if stopping():
            return None
        if plan.task_dir in index["skipped"]:
            res.status = f"skipped: {index['skipped'][plan.task_dir]}"
            return []
        bar.set_postfix_str(f"sampling {plan.task_dir[:40]}")
        return _start_task(plan, cfg, target, device_path / plan.task_dir, res)

    def sampled_tasks() -> Iterator[list[tuple[_TaskRun, tvm.s_tir.Schedule]]]:
        tasks = list(zip(plans, results))
        for (plan, res), picked in zip(tasks, map_ahead(lambda t: sample(*t), tasks, samplers)):
            if picked is None or stopping():
                return
            if plan.task_dir in index["skipped"]:
                continue
            bar.update(max(0, cfg.per_task - res.before) - len(picked))
            if res.status.startswith("skipped"):
                skipped[plan.task_dir] = res.status.removeprefix("skipped: ")
            reached.add(plan.task_dir)
            if picked:
                runs.append(picked[0][0])
                yield picked

    def commit(rows: list[tuple[tuple[_TaskRun, tvm.s_tir.Schedule], ms.MeasureCandidate, list[float] | None]]) -> None:
        nonlocal settings
        measured = 0
        for (run, sch), cand, secs in rows:
            run.pending -= 1
            if secs is None:  # refused by the source guard: not a record (a failure would teach "slow")
                run.result.refused += 1
            else:
                run.db.commit_tuning_record(
                    ms.database.TuningRecord(sch.trace, run.workload, secs, target, cand.args_info)
                )
                run.result.new += 1
                measured += 1
                stored.add(run.plan.task_dir)
                if mean_latency(secs) == float("inf"):
                    run.result.failed += 1
                else:
                    run.result.valid += 1
            if run.pending == 0 and cfg.compress:
                _set_compressed(run.path, True)
        bar.update(len(rows))
        if settings is None:
            settings = measurement_settings(cfg, target, n_runners, overlap)
            index.setdefault("collections", []).append(settings)
        settings["records"] += measured
        settings["refused"] += len(rows) - measured
        _update_index(index, plans, stored, skipped)
        write_index(device_path, index)

    needed = sum(max(0, cfg.per_task - r.before) for r in results if r.task_dir not in index["skipped"])
    n_runners = runner_count(cfg, target) if needed else 1
    per_net = [f"{net}: {sum(net in p.networks for p in plans)}" for net in cfg.networks]
    what = (
        "every task in the index" if cfg.top_up and not cfg.networks else ", ".join([*per_net, f"ops: {len(cfg.ops)}"])
    )
    print(
        f"{len(plans)} tasks ({what}); {needed} records to measure into {device_path}",
        flush=True,
    )
    with tqdm(total=needed, unit="rec", desc="collect", dynamic_ncols=True) as bar:
        try:
            if cfg.sequential:
                measure_sequential(sampled_tasks(), commit, cfg, target, stopping, times, n_runners)
            else:
                measure_pipelined(sampled_tasks(), commit, cfg, target, stopping, times, n_runners, overlap)
        except (KeyboardInterrupt, RuntimeError) as err:
            if not (isinstance(err, KeyboardInterrupt) or _interrupted):
                raise
        finally:
            _update_index(index, plans, stored, skipped)
            write_index(device_path, index)
        if any(run.pending for run in runs) or stopping():
            for run in runs:
                if run.pending:
                    run.result.status = "interrupted"
            for res in results:  # tasks the stop came before
                if res.task_dir not in reached and res.status == "complete" and res.before < cfg.per_task:
                    res.status = "interrupted"
            why = "deadline reached" if time.monotonic() > end else "interrupted"
            bar.write(f"{why}: every measured batch is stored; rerun the same command to resume")
    return results


def _summary(cfg: CollectConfig, results: Sequence[TaskResult], device_path: Path, elapsed: float) -> str:
    new = sum(r.new for r in results)
    totals = [count_records(device_path / r.task_dir) for r in results]
    lines = [
        f"dataset {device_path}",
        f"tasks: {len(results)} planned, {sum(t[0] >= cfg.per_task for t in totals)} complete, "
        f"{sum(r.status == 'exhausted' for r in results)} exhausted (space smaller than --per-task), "
        f"{sum(r.status.startswith('skipped') for r in results)} skipped",
        f"records on disk: {sum(t[0] for t in totals)} ({sum(t[1] for t in totals)} valid)",
        f"measured this run: {new} ({sum(r.valid for r in results)} valid, {sum(r.failed for r in results)} failed)"
        f" in {elapsed:.0f} s" + (f" ({elapsed / new:.2f} s/record)" if new else ""),
    ]
    refused = sum(r.refused for r in results)
    if refused:
        lines.append(f"refused over --max-source-kb {cfg.max_source_kb:g}: {refused} (not built, not stored)")
    lines += [
        f"  skipped {r.task_dir}: {r.status.removeprefix('skipped: ')}"
        for r in results
        if r.status.startswith("skipped")
    ]
    return "\n".join(lines)


def _parser() -> ArgumentParser:
    """The CLI (jsonargparse: `--config FILE`, `--print_config`, defaults in --help). Flags share
    tune.py's names (`--network`, `--workload`, `--input-size`, `--workers`); the old ones
    (`--networks`, `--ops`, `--size`, `--builder-workers`) stay as aliases for one release."""
    from jsonargparse import ActionConfigFile, ActionYesNo, DefaultHelpFormatter

    defaults = {f.name: f.default for f in dataclasses.fields(CollectConfig)}
    p = ArgumentParser(
        prog="python -m data.collect", description=__doc__.split("\n\n")[0], formatter_class=DefaultHelpFormatter
    )
    p.add_argument("--config", action=ActionConfigFile, help="a YAML/JSON file of these options")
    p.add_argument("--target", type=str, required=True, help="tag ('nvidia/nvidia-h100') or JSON dict")
    p.add_argument("--out", type=str, required=True, help="dataset root (records go under OUT/<device>/)")
    p.add_argument(
        "--network",
        "--networks",
        dest="networks",
        type=str,
        nargs="+",
        default=[],
        help=f"networks: zoo names ({', '.join(NETWORKS)}) or your own model (path.py:factory, .onnx, relax .json)",
    )
    p.add_argument(
        "--workload",
        "--ops",
        dest="ops",
        type=str,
        nargs="+",
        default=[],
        help="operators, e.g. matmul:512,512,512",
    )
    p.add_argument("--per-task", type=int, default=defaults["per_task"], help="distinct schedules per task")
    p.add_argument("--seed", type=int, default=defaults["seed"], help="base seed of the sampler")
    p.add_argument(
        "--batch-size", type=int | None, default=None,
        help="candidates per build/run chunk (default: 2x --workers when runs overlap builds, else 128)",
    )  # fmt: skip
    p.add_argument(
        "--workers", "--builder-workers", dest="builder_workers", type=int | None, default=None,
        help="parallel builds (default: all cores)",
    )  # fmt: skip
    p.add_argument("--timeout", type=float, default=defaults["timeout"], help="seconds per build and per run")
    p.add_argument(
        "--max-source-kb", type=float | None, default=None,
        help="do not build CUDA kernels with more source than this (KB; refused before NVRTC, not stored)",
    )  # fmt: skip
    p.add_argument("--runner", type=str, choices=("local", "rpc"), default="local", help="measure here or via RPC")
    p.add_argument("--tracker", type=str | None, default=None, help="RPC tracker host:port (with --runner rpc)")
    p.add_argument("--key", type=str | None, default=None, help="RPC device key (with --runner rpc)")
    p.add_argument(
        "--runners", type=int | None, default=None,
        help="parallel runs (default: one per visible CUDA GPU, or per RPC server of --key; 1 on a CPU)",
    )  # fmt: skip
    p.add_argument(
        "--sequential", action=ActionYesNo(no_prefix="no-"), default=False,
        help="sample, build, run one batch after the other (the first way; for comparison)",
    )  # fmt: skip
    p.add_argument(
        "--overlap-runs", action=ActionYesNo(no_prefix="no-"), default=None,
        help="run while building (default: yes on GPU and RPC targets, no for a local CPU target)",
    )  # fmt: skip
    p.add_argument("--repeat", type=int, default=defaults["repeat"], help="measurements per candidate")
    p.add_argument(
        "--min-repeat-ms", type=int, default=defaults["min_repeat_ms"], help="minimum milliseconds of a measurement"
    )
    p.add_argument("--max-tasks", type=int | None, default=None, help="per network: keep the heaviest N tasks")
    p.add_argument("--min-flops", type=float, default=0.0, help="drop network tasks below this many FLOPs")
    p.add_argument("--max-flops", type=float | None, default=None, help="drop network tasks above this many FLOPs")
    p.add_argument(
        "--input-size", "--size", dest="size", type=int | None, default=None,
        help="zoo network input size (image side / sequence length; default: the network's own)",
    )  # fmt: skip
    p.add_argument("--population", type=int, default=defaults["population"], help="sampler population size")
    p.add_argument(
        "--samplers", type=int, default=defaults["samplers"],
        help="tasks sampled at once ahead of the builds (when runs overlap builds; else 1)",
    )  # fmt: skip
    p.add_argument(
        "--min-schedules", type=int, default=defaults["min_schedules"], help="skip tasks with fewer distinct schedules"
    )
    p.add_argument(
        "--compress",
        action=ActionYesNo(no_prefix="no-"),
        default=False,
        help="store finished tasks as database_*.json.xz",
    )
    p.add_argument(
        "--deadline",
        type=float | None,
        default=None,
        help="stop starting new batches this many seconds after the start (task extraction included)",
    )
    p.add_argument(
        "--extract-workers", type=int | None, default=None,
        help="networks extracted at once, one process each (default: one per network, up to half the cores; 1: in turn)",
    )  # fmt: skip
    p.add_argument(
        "--plan-only",
        action=ActionYesNo(no_prefix="no-"),
        default=False,
        help="extract and plan the tasks, write their workloads and index them, measure nothing "
        "(extract on a CPU host, then measure with --top-up on the GPU machine)",
    )
    p.add_argument(
        "--top-up", action=ActionYesNo(no_prefix="no-"), default=False,
        help="add records to the tasks already in the tree (of --network, or all) without extracting networks",
    )  # fmt: skip
    p.add_argument("--verbose", action=ActionYesNo(no_prefix="no-"), default=False, help="log build and run errors")
    return p


_stop_requested = False
"""Set by the first SIGINT/SIGTERM: the run stops after the batch in flight, which is stored."""
_interrupted = False
"""Set by a second signal, which aborts at once. TVM's FFI turns a KeyboardInterrupt raised inside a
Python callback (the builder, the sampler's cost model) into a plain RuntimeError, so the flag
tells them apart."""


def _on_signal(signum: int, frame: object) -> None:
    """First signal: finish and store the batch in flight, then stop. Second: abort now.

    Raising inside TVM's FFI callbacks on the first signal crashed the interpreter on CUDA (the FFI
    formats the traceback while the signal fires again), so the first signal only sets a flag.
    """
    global _stop_requested, _interrupted
    if not _stop_requested:
        _stop_requested = True
        print("stopping after the batch in flight (signal again to abort it)", file=sys.stderr, flush=True)
        return
    _interrupted = True
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> list[TaskResult]:
    """Parse, collect, print the summary; the results. Bad arguments and unusable inputs exit 2 with
    an `error:` line (no traceback)."""
    parser = _parser()
    args = parser.parse_args(None if argv is None else [str(a) for a in argv])
    args = {k: v for k, v in vars(args).items() if k not in ("config", "__path__")}
    logging.basicConfig(level=logging.DEBUG if args.pop("verbose") else logging.WARNING)
    args["networks"], args["ops"] = tuple(args["networks"] or ()), tuple(args["ops"] or ())
    # Stop like Ctrl-C on `kill`/`timeout` too, and on SIGINT even when started in the background
    # (a non-interactive shell starts background jobs with SIGINT ignored).
    global _stop_requested, _interrupted
    _stop_requested = _interrupted = False
    before = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    start, times = time.time(), StageTimes()
    try:
        cfg = CollectConfig(**args)
        results = collect(cfg, times)
    except ValueError as err:
        parser.error(str(err))
    finally:  # a caller in the same process (a test, a notebook) gets its own handlers back
        for sig, handler in before.items():
            signal.signal(sig, handler)
    device_path = Path(cfg.out) / target_device_name(parse_target(cfg.target))
    print(_summary(cfg, results, device_path, time.time() - start))
    if times.records:
        print(times.summary())
    return results


def cli(argv: Sequence[str] | None = None) -> int:
    """Entry point: 0 when every task is complete or skipped, 1 when the run was interrupted (a
    signal or the deadline: rerun the same command to resume), 2 for bad arguments."""
    results = main(argv)
    return 1 if any(r.status == "interrupted" for r in results) else 0


if __name__ == "__main__":
    sys.exit(cli())
