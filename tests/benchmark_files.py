"""What the tests of `benchmarks/` scripts share: loading a script as a module (benchmarks/ is not a
package) and writing a small synthetic shard folder for them to run on for real."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from data.shards import write_shard
from data.synthetic import synthetic_shard_data

REPO = Path(__file__).resolve().parents[1]


def load_benchmark(name: str) -> ModuleType:
    """`benchmarks/<name>.py` as a module named `<name>_benchmark` (`gpu/keep`: benchmarks/gpu/keep.py)."""
    module_name = f"{name.replace('/', '_')}_benchmark"
    spec = importlib.util.spec_from_file_location(module_name, REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def small_shards(path: Path, records_per_task: int = 60, seed: int = 3, source: str = "test") -> Path:
    """One shard of 8 synthetic tasks (networks net_a / net_b, 3-4 statement rows a record) in `path`."""
    data = synthetic_shard_data(num_tasks=8, records_per_task=records_per_task, rows_per_record=(3, 4), seed=seed)
    write_shard(Path(path) / "shard.h5", data, {"source": source})
    return Path(path)


def fastest_records(folder: Path, into: Path, n: int) -> Path:
    """A copy in `into` of the tuning database in `folder` (`database_*.json`, plain or `.xz`, written
    as it was) that keeps only the `n` fastest records of each workload (`data.labels.mean_latency`:
    failed and implausible ones last), in their order: a test that reads a suite arm's database for its
    best schedules then parses and replays tens of records, not a thousand and more."""
    import json
    import lzma

    from data.labels import mean_latency
    from data.record_tree import RECORD_FILE, WORKLOAD_FILE, XZ, database_file

    into = Path(into)
    into.mkdir(parents=True, exist_ok=True)
    texts = {}
    for name in (WORKLOAD_FILE, RECORD_FILE):
        found = database_file(Path(folder), name)
        assert found is not None, f"{folder}: no {name}"
        opener = lzma.open if found.name.endswith(XZ) else open
        with opener(found, "rt") as f:
            texts[name] = (f.read(), opener, into / found.name)
    lines = [line for line in texts[RECORD_FILE][0].splitlines() if line.strip()]
    parsed = [json.loads(line) for line in lines]
    keep = set()
    for workload in {record[0] for record in parsed}:
        mine = [i for i, record in enumerate(parsed) if record[0] == workload]
        keep.update(sorted(mine, key=lambda i: mean_latency(parsed[i][1][1]))[:n])
    kept = "".join(lines[i] + "\n" for i in sorted(keep))
    for name, text in ((WORKLOAD_FILE, texts[WORKLOAD_FILE][0]), (RECORD_FILE, kept)):
        _, opener, path = texts[name]
        with opener(path, "wt") as f:
            f.write(text)
    return into


def twin_database(records_of: str, path: Path, target) -> Path:
    """A tuning database in `path` of three records of the first workload of the llvm matmul database
    `records_of`, in this order: its first valid record's schedule with an annotation that no pass
    reads, measured at 2 ms; the same schedule without it, at 1 ms (one kernel, which MetaSchedule
    tells apart); and its second valid record's schedule, at 3 ms."""
    from data.records import read_records
    from tvm_env import ms, tvm

    replay = load_benchmark("build_profile").replay
    records = [r for task in read_records([records_of]).tasks.values() for r in task.records if r.valid]
    plain, noted, other = replay(records[0]), replay(records[0]), replay(records[1])
    noted.annotate(noted.get_sblock("C_init"), "pruner_note", 1)
    database = ms.database.JSONDatabase(work_dir=str(path))
    original = ms.database.Workload.from_json(records[0].workload.as_json()).mod  # the unscheduled matmul
    workload = database.commit_workload(original)
    args = ms.arg_info.ArgInfo.from_prim_func(original["main"])
    for sch, secs in ((noted, 2e-3), (plain, 1e-3), (other, 3e-3)):  # the kernel measured slow first
        run_secs = [tvm.tirx.FloatImm("float32", secs)]
        database.commit_tuning_record(ms.database.TuningRecord(sch.trace, workload, run_secs, target, args))
    return Path(path)
