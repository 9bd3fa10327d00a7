"""benchmarks/build_profile.py --databases: the schedules a tuning database measured, replayed."""

import json
import shutil

from benchmark_files import load_benchmark

import tvm_env
from data.features import schedule_key
from data.records import read_records

build_profile = load_benchmark("build_profile")
MATMUL = "tests/fixtures/tiny_records/llvm-sapphirerapids-2c/matmul_e87e4aed"


def test_measured_schedules_replay_the_records_traces():
    (task,) = read_records([MATMUL]).tasks.values()
    picked = build_profile.measured_schedules(MATMUL, 3, seed=0)
    assert len(picked) == 3 and len({schedule_key(s.mod) for s in picked}) == 3
    # the same seed picks the same schedules; all of them when asked for more than there are
    assert [schedule_key(s.mod) for s in build_profile.measured_schedules(MATMUL, 3, seed=0)] == [
        schedule_key(s.mod) for s in picked
    ]
    everything = build_profile.measured_schedules(MATMUL, 10_000, seed=1)
    assert len(everything) == sum(r.valid for r in task.records)
    # replayed, not the bare workload: no picked schedule is the unscheduled module
    workload = tvm_env.ms.database.Workload.from_json(task.records[0].workload.as_json()).mod
    assert schedule_key(workload) not in {schedule_key(s.mod) for s in everything}


def test_records_whose_measurement_failed_are_not_profiled(tmp_path):
    """A failed record may be a schedule TVM cannot build (a collector's random sample): left out."""
    db = tmp_path / "matmul"
    shutil.copytree(MATMUL, db)
    lines = (db / "database_tuning_record.json").read_text().splitlines()
    failed = json.loads(lines[0])
    failed[1][1] = [1e10]  # how data.collect stores a failed build or run
    (db / "database_tuning_record.json").write_text("\n".join([json.dumps(failed), *lines[1:]]) + "\n")
    assert len(build_profile.measured_schedules(str(db), 10_000, seed=0)) == len(lines) - 1
