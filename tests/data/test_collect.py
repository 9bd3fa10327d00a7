"""data.collect: a real (tiny) collection on llvm, resume and top-up, compression, bad input."""

import json
import lzma
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tvm import te

from data.collect import (
    CollectConfig,
    TaskPlan,
    TaskResult,
    _set_compressed,
    _start_task,
    count_records,
    main,
    sample_schedules,
)
from data.labels import mean_latency
from data.zoo import TaskSpec, operator_task
from tvm_env import ms, parse_target, target_device_name, tvm, tvm_ffi

TARGET = '{"kind": "llvm", "mcpu": "native", "num-cores": 2}'
DEVICE = target_device_name(parse_target(TARGET))  # the host CPU: measurements run here
SPEC = "matmul:32,32,32"
REPO = Path(__file__).resolve().parents[2]
FAST = ["--batch-size", "8", "--builder-workers", "1", "--repeat", "3", "--min-repeat-ms", "1", "--population", "64"]


def _run(out, per_task, *extra):
    return main(["--target", TARGET, "--ops", SPEC, "--per-task", str(per_task), "--out", str(out), *FAST, *extra])


def _task_dir(out):
    return out / DEVICE / operator_task(SPEC).task_dir


def _records(task_dir):
    db = ms.database.JSONDatabase(
        str(task_dir / "database_workload.json"), str(task_dir / "database_tuning_record.json")
    )
    return db.get_all_tuning_records()


def _collector_with_stored_records(cmd, out, at_least=8):
    """A collector process (`cmd`) that has stored at least `at_least` records of the task in `out`."""
    import time

    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    records = _task_dir(out) / "database_tuning_record.json"
    deadline = time.time() + 240
    while not (records.exists() and records.read_text().count("\n") >= at_least) and time.time() < deadline:
        assert proc.poll() is None, proc.stdout.read()
        time.sleep(0.1)
    return proc


def _schedule_hashes(records):
    return [int(tvm_ffi.structural_hash(r.as_measure_candidate().sch.mod)) for r in records]


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    """One real collection of 5 schedules of a 32^3 matmul, shared (copied) by the tests."""
    out = tmp_path_factory.mktemp("collect")
    results = _run(out, 5)
    return out, results


@pytest.fixture
def dataset(first_run, tmp_path):
    out = tmp_path / "ds"
    shutil.copytree(first_run[0], out)
    return out


def test_collection_writes_a_readable_database(first_run):
    out, results = first_run
    assert [(r.new, r.status) for r in results] == [(5, "complete")]
    records = _records(_task_dir(out))
    assert len(records) == 5
    latencies = [mean_latency([float(s) for s in r.run_secs]) for r in records]
    assert all(np.isfinite(latencies)), latencies
    assert all(len(r.run_secs) == 3 for r in records), "one entry per --repeat"
    assert len(set(_schedule_hashes(records))) == 5, "schedules must be structurally distinct"
    spec = operator_task(SPEC)
    assert tvm_ffi.structural_equal(records[0].workload.mod, spec.mod)
    workload_line = json.loads((_task_dir(out) / "database_workload.json").read_text().splitlines()[0])
    assert workload_line[0] == spec.workload_hash


def test_index_json(first_run):
    out, _ = first_run
    index = json.loads((out / DEVICE / "index.json").read_text())
    spec = operator_task(SPEC)
    assert index["target"]["kind"] == "llvm" and index["target"]["num-cores"] == 2
    assert index["tasks"] == {
        spec.task_dir: {"name": spec.name, "flops": 2 * 32**3, "workload_hash": spec.workload_hash, "networks": []}
    }
    assert index["networks"] == {} and index["skipped"] == {}


def _plain_copy(task_dir, dest):
    """The task's database files decompressed into `dest` (JSONDatabase reads plain JSON only)."""
    dest.mkdir()
    for name in ("database_workload.json", "database_tuning_record.json"):
        (dest / name).write_bytes(lzma.decompress((task_dir / (name + ".xz")).read_bytes()))
    return dest


def test_top_up_compressed_then_rerun_measures_nothing(dataset, tmp_path):
    task_dir = _task_dir(dataset)
    before = (task_dir / "database_tuning_record.json").read_text().splitlines()
    (result,) = _run(dataset, 8, "--compress")
    assert (result.before, result.new, result.status) == (5, 3, "complete")
    assert sorted(p.name for p in task_dir.iterdir()) == ["database_tuning_record.json.xz", "database_workload.json.xz"]
    assert count_records(task_dir) == (8, 8)
    plain = _plain_copy(task_dir, tmp_path / "plain")
    lines = (plain / "database_tuning_record.json").read_text().splitlines()
    assert lines[:5] == before, "top-up must keep the stored records untouched"
    hashes = _schedule_hashes(_records(plain))
    assert len(hashes) == 8 and len(set(hashes)) == 8, "top-up must not re-measure a stored schedule"

    stamp = (task_dir / "database_tuning_record.json.xz").stat().st_mtime_ns
    (again,) = _run(dataset, 8, "--compress")
    assert (again.before, again.new, again.status) == (8, 0, "complete")
    assert (task_dir / "database_tuning_record.json.xz").stat().st_mtime_ns == stamp


def _as_network_task(dataset, network, weight):
    """Make the stored matmul task a task of `network` (weight `weight`) in the index, as a network
    collection would have listed it."""
    index_path = dataset / DEVICE / "index.json"
    index = json.loads(index_path.read_text())
    folder = operator_task(SPEC).task_dir
    index["tasks"][folder]["networks"] = [network]
    index["networks"][network] = [[folder, weight]]
    index_path.write_text(json.dumps(index))
    return index_path


def test_top_up_plans_from_the_index_without_extracting(dataset, capsys):
    """--top-up reads the tasks of a network from the tree (no zoo, no extraction: the network name
    exists only in the index), adds records to them and keeps their weights."""
    index_path = _as_network_task(dataset, "net_only_in_the_index", 3)
    before = (_task_dir(dataset) / "database_tuning_record.json").read_text().splitlines()
    argv = ["--target", TARGET, "--top-up", "--per-task", "7", "--out", str(dataset), *FAST]
    (result,) = main([*argv, "--network", "net_only_in_the_index"])
    assert (result.task_dir, result.before, result.new, result.status) == (_task_dir(dataset).name, 5, 2, "complete")
    assert (_task_dir(dataset) / "database_tuning_record.json").read_text().splitlines()[:5] == before
    hashes = _schedule_hashes(_records(_task_dir(dataset)))
    assert len(hashes) == 7 and len(set(hashes)) == 7
    index = json.loads(index_path.read_text())
    assert index["networks"] == {"net_only_in_the_index": [[_task_dir(dataset).name, 3]]}
    assert index["collections"][-1]["records"] == 2
    capsys.readouterr()
    (again,) = main(argv)  # no --network: every indexed task
    assert (again.before, again.new) == (7, 0)
    assert "1 tasks (every task in the index)" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--network", "resnet_50"])
    assert exit_info.value.code == 2
    assert "index.json: no tasks of network(s) resnet_50 to top up" in capsys.readouterr().err


def test_plan_only_indexes_workloads_then_top_up_measures_them(tmp_path):
    """--plan-only (extraction on a CPU host) writes each task's workload and indexes it, measuring
    nothing; a later --top-up run (the GPU machine) measures those tasks without extracting."""
    out = tmp_path / "planned"
    (planned,) = _run(out, 5, "--plan-only", "--compress")
    task = _task_dir(out)
    assert (planned.before, planned.new, planned.status) == (0, 0, "planned")
    assert sorted(p.name for p in task.iterdir()) == ["database_tuning_record.json.xz", "database_workload.json.xz"]
    assert count_records(task) == (0, 0)
    index = json.loads((out / DEVICE / "index.json").read_text())
    assert task.name in index["tasks"] and not index.get("collections")
    (measured,) = main(["--target", TARGET, "--top-up", "--per-task", "5", "--compress", "--out", str(out), *FAST])
    assert (measured.task_dir, measured.before, measured.new) == (task.name, 0, 5)
    assert count_records(task)[0] == 5
    assert sorted(p.name for p in task.iterdir()) == ["database_tuning_record.json.xz", "database_workload.json.xz"]
    (again,) = _run(out, 5, "--plan-only", "--compress")  # planning again keeps the records
    assert (again.before, count_records(task)[0]) == (5, 5)


def test_top_up_refuses_a_workload_that_is_not_the_indexed_one(dataset, capsys):
    index_path = _as_network_task(dataset, "net_a", 1)
    index = json.loads(index_path.read_text())
    index["tasks"][operator_task(SPEC).task_dir]["workload_hash"] = "123"
    index_path.write_text(json.dumps(index))
    with pytest.raises(SystemExit):
        main(["--target", TARGET, "--top-up", "--per-task", "7", "--out", str(dataset), *FAST])
    err = capsys.readouterr().err
    assert f"{operator_task(SPEC).task_dir}: workload hash" in err and "is not the index's 123" in err


def test_other_target_in_index_is_refused(dataset, capsys):
    index_path = dataset / DEVICE / "index.json"
    index = json.loads(index_path.read_text())
    index["target"]["mcpu"] = "skylake"  # another CPU's index (never measured here)
    index_path.write_text(json.dumps(index))
    with pytest.raises(SystemExit) as exit_info:
        _run(dataset, 6)
    assert exit_info.value.code == 2 and "index.json: collected for target" in capsys.readouterr().err


def test_malformed_record_names_file_and_line(dataset):
    path = _task_dir(dataset) / "database_tuning_record.json"
    path.write_text(path.read_text() + "{not json\n")
    with pytest.raises(ValueError, match=r"database_tuning_record.json:6: malformed tuning record"):
        count_records(path.parent)


@pytest.mark.parametrize("compressed", [False, True])
def test_a_stored_record_that_no_longer_replays_names_its_file_and_line(dataset, capsys, compressed):
    """A record whose trace does not apply to its workload (here the matmul's trace on another workload,
    as a record stored by another TVM would be) makes TVM's loader fail with "parallel_for_dynamic
    error" and no file or line; the collector names both, and leaves the task's files as they came
    (a compressed task, decompressed to be read, compressed again)."""
    task = _task_dir(dataset)
    db = ms.database.JSONDatabase(str(task / "database_workload.json"), str(task / "database_tuning_record.json"))
    r = db.get_all_tuning_records()[0]
    a = te.placeholder((8,), name="A")
    other = tvm.IRModule({"main": te.create_prim_func([a, te.compute((8,), lambda i: a[i] * 2, name="other")])})
    db.commit_tuning_record(
        ms.database.TuningRecord(r.trace, db.commit_workload(other), r.run_secs, r.target, r.args_info)
    )
    if compressed:
        _set_compressed(task, True)
    before = {p.name: p.read_bytes() for p in task.iterdir()}
    with pytest.raises(SystemExit) as exit_info:
        _run(dataset, 8)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err
    assert (
        f"error: {task}/database_tuning_record.json:6: unreadable tuning record "
        "(ScheduleError: its trace does not apply); the task's records are kept as they are" in err
    ), err[-1500:]
    after = {p.name: p.read_bytes() for p in task.iterdir()}
    assert sorted(after) == sorted(before) and sorted(before)[0].endswith(".xz") == compressed
    unpack = lzma.decompress if compressed else (lambda b: b)
    assert {n: unpack(b) for n, b in after.items()} == {n: unpack(b) for n, b in before.items()}


def test_an_empty_line_in_a_stored_task_is_named_not_loaded(dataset, capsys):
    """TVM's load dies of a segfault on an empty line: the collector looks first and names it."""
    path = _task_dir(dataset) / "database_tuning_record.json"
    lines = path.read_text().splitlines()
    path.write_text("\n".join([*lines[:2], "", *lines[2:]]) + "\n")
    with pytest.raises(SystemExit) as exit_info:
        _run(dataset, 8)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and f"error: {path}:3: empty line; the task's records are kept" in err, err[-1500:]


def test_unsampleable_task_is_skipped(tmp_path):
    """A copy kernel has a single schedule: nothing to rank, so it is skipped and nothing is written."""
    a = te.placeholder((4,), name="A")
    mod = tvm.IRModule({"main": te.create_prim_func([a, te.compute((4,), lambda i: a[i], name="B")])})
    spec = TaskSpec.from_mod("copy", mod)
    cfg = CollectConfig(target=TARGET, out=str(tmp_path), ops=[SPEC], per_task=4)
    result = TaskResult(spec.task_dir, 0)
    picked = _start_task(TaskPlan(spec, spec.task_dir, {}), cfg, parse_target(TARGET), tmp_path / spec.task_dir, result)
    assert picked == []
    assert result.status == "skipped: only 1 distinct schedules (< --min-schedules)"
    assert not (tmp_path / spec.task_dir).exists()


def test_sampler_excludes_known_schedules():
    spec = operator_task("matmul:16,16,16")
    target = parse_target(TARGET)
    first = sample_schedules(spec, target, 6, seed=1, exclude=set())
    known = {int(tvm_ffi.structural_hash(s.mod)) for s in first}
    exclude = set(known)
    second = sample_schedules(spec, target, 6, seed=1, exclude=exclude)
    hashes = {int(tvm_ffi.structural_hash(s.mod)) for s in second}
    assert len(first) == 6 and len(second) == 6
    assert not hashes & known and exclude == known | hashes


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "nothing to collect"),
        ({"networks": ["vgg"]}, r"network 'vgg' is not in the zoo"),
        ({"ops": [SPEC], "per_task": 0}, "per_task=0 must be positive"),
        ({"ops": [SPEC], "max_source_kb": 0}, r"max_source_kb=0 must be positive \(KB\)"),
        ({"ops": [SPEC], "runner": "ssh"}, "runner='ssh'"),
        ({"ops": [SPEC], "runner": "rpc", "tracker": "localhost"}, "needs --tracker host:port and --key"),
    ],
)
def test_config_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        CollectConfig(target=TARGET, out="unused", **kwargs)


def test_cli_reports_config_errors(capsys):
    with pytest.raises(SystemExit) as exit_info:
        _run("unused", 0)
    assert exit_info.value.code == 2 and "error: per_task=0 must be positive" in capsys.readouterr().err


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    """One real collector process per stop, on one tree: `kill -9` after its first stored batch, then
    the same command again (it resumes) stopped by SIGTERM after its own first batch, then the same
    command in this process, which completes the task. Each stop is what the test of its name checks
    (sharing the tree saves a collector process and its workers)."""
    import os

    out = tmp_path_factory.mktemp("interrupted") / "ds"
    args = ["--target", TARGET, "--workload", SPEC, "--per-task", str(PER_TASK), "--out", str(out), *FAST]
    cmd = [sys.executable, "-m", "data.collect", *args]
    records = _task_dir(out) / "database_tuning_record.json"
    proc = _collector_with_stored_records(cmd, out)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    killed = count_records(_task_dir(out))[0]  # raises, naming file and line, on a torn line
    killed_lines = records.read_text().splitlines()
    proc = _collector_with_stored_records(cmd, out, at_least=killed + 8)
    os.kill(proc.pid, signal.SIGTERM)
    output, _ = proc.communicate(timeout=240)
    termed = count_records(_task_dir(out))[0]
    termed_lines = records.read_text().splitlines()
    return {
        "killed": killed, "killed_lines": killed_lines, "term_returncode": proc.returncode, "term_output": output,
        "termed": termed, "termed_lines": termed_lines, "rerun": main(args), "out": out,
    }  # fmt: skip


PER_TASK = 32
"""Schedules the interrupted collection asks for: room for a batch in flight at each stop."""


def test_kill_9_mid_collect_then_rerun_completes_without_duplicates(interrupted):
    """`kill -9` (no chance to clean up) after the first batches: every line on disk is whole, and
    reruns of the same command resume from those records and top the task up to --per-task distinct
    schedules."""
    killed, termed_lines = interrupted["killed"], interrupted["termed_lines"]
    assert 8 <= killed < PER_TASK
    assert len(termed_lines) > killed and termed_lines[:killed] == interrupted["killed_lines"], "the rerun resumed"
    (rerun,) = interrupted["rerun"]
    assert (rerun.before, rerun.status) == (interrupted["termed"], "complete")  # `cli` exits 0
    hashes = _schedule_hashes(_records(_task_dir(interrupted["out"])))
    assert len(hashes) == PER_TASK and len(set(hashes)) == PER_TASK


def test_sigterm_stops_after_the_batch_in_flight_and_rerun_resumes(interrupted):
    """`kill`/`timeout` (SIGTERM) ends a real collector process cleanly: the batch being measured is
    stored, the summary prints, and a rerun tops up to --per-task without re-measuring."""
    output, killed, termed = interrupted["term_output"], interrupted["killed"], interrupted["termed"]
    assert interrupted["term_returncode"] == 1, output  # interrupted: not a success, and rerunning resumes
    assert "interrupted: every measured batch is stored" in output
    assert killed + 8 <= termed < PER_TASK and (termed - killed) % 8 == 0, output  # whole batches only
    (rerun,) = interrupted["rerun"]
    assert rerun.new == PER_TASK - termed
    lines = (_task_dir(interrupted["out"]) / "database_tuning_record.json").read_text().splitlines()
    assert lines[:termed] == interrupted["termed_lines"], "the rerun keeps the stored records"
    assert len(set(_schedule_hashes(_records(_task_dir(interrupted["out"]))))) == PER_TASK


def test_deadline_stops_before_the_next_batch(tmp_path):
    """The deadline passes before any batch: nothing is measured, and every task (the one sampled and
    queued as well as the one the stop came before) reports "interrupted", not "complete"."""
    other = "matmul:16,16,16"
    before_term, before_int = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    results = main(
        [
            "--target",
            TARGET,
            "--ops",
            SPEC,
            other,
            "--per-task",
            "24",
            "--out",
            str(tmp_path),
            *FAST,
            "--deadline",
            "0.001",
        ]
    )
    assert [(r.new, r.status) for r in results] == [(0, "interrupted"), (0, "interrupted")]
    # the caller's signal handlers are back: a later SIGTERM to this process is not swallowed
    assert signal.getsignal(signal.SIGTERM) is before_term and signal.getsignal(signal.SIGINT) is before_int
    assert count_records(_task_dir(tmp_path))[0] == 0
    assert count_records(tmp_path / DEVICE / operator_task(other).task_dir)[0] == 0


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--workload", "matmul:1,2"], "expected matmul:M,N,K, got 2 parameters"),
        (["--workload", "matmul:3000000000,1,1"], "larger than 65536"),
        (["--network", "no_such_net"], "no_such_net"),
        (["--per-task", "0", "--workload", SPEC], "per_task=0 must be positive"),
        (["--max-source-kb", "-1", "--workload", SPEC], "max_source_kb=-1.0 must be positive"),
    ],
)
def test_bad_arguments_get_error_lines_not_tracebacks(tmp_path, capsys, extra, message):
    """`main`, which `python -m data.collect` runs (its own process: the test below), exits 2 with an
    `error:` line; an exception escaping instead would fail `pytest.raises(SystemExit)`."""
    with pytest.raises(SystemExit) as exit_info:
        main(["--target", TARGET, "--out", str(tmp_path), *extra])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "error: " in err and message in err, err[-1500:]
    assert "Traceback" not in err


def test_bad_arguments_of_the_collector_process_get_an_error_line(tmp_path):
    """The command a user runs: a workload refused while planning (after the arguments parsed) ends
    the process with exit status 2 and an `error:` line, no traceback."""
    cmd = [sys.executable, "-m", "data.collect", "--target", TARGET, "--out", str(tmp_path),
           "--workload", "matmul:3000000000,1,1"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 2 and "error: " in done.stderr and "larger than 65536" in done.stderr, done.stderr[-1500:]
    assert "Traceback" not in done.stderr
