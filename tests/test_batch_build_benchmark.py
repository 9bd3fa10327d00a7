"""benchmarks/batch_build.py: a tuning database's schedules built in batches with the tuning builder, for real."""

import json

from benchmark_files import load_benchmark

batch_build = load_benchmark("batch_build")
MATMUL = "tests/fixtures/tiny_records/llvm-sapphirerapids-2c/matmul_e87e4aed"
TARGET = '{"kind": "llvm", "num-cores": 2}'


def test_batches_and_single_builds_are_timed_and_written(tmp_path):
    out = tmp_path / "bb.json"
    # one worker: the batch pool and the serial pool are a worker process (a TVM import) each; and
    # batch 2 on 1 worker tells batch x serial / workers from its inverse
    result = batch_build.batch_build(
        databases=(MATMUL,), target=TARGET, picks=5, batch=2, serial=2, workers=1, json_out=out
    )
    summary = result[MATMUL]
    assert [b["picks"] for b in summary["batches"]] == [2, 2, 1]  # the last batch holds the rest
    assert all(b["failed"] == 0 and b["wall_s"] > 0 for b in summary["batches"])
    assert all(0 < b["build_cpu_s"] and 0 < b["build_work_s"] <= b["wall_s"] for b in summary["batches"])
    assert len(summary["serial_s"]) == 2 and summary["serial_max_s"] == max(summary["serial_s"]) > 0
    assert summary["ideal_batch_s"] == summary["serial_mean_s"] * 2 / 1
    assert json.loads(out.read_text())[MATMUL]["batches"] == summary["batches"]
    assert result["workers"] == 1 and result["max_source_kb"] is None
