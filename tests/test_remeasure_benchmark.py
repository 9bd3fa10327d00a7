"""benchmarks/remeasure.py on real llvm records: each database's best records are built and measured
again here, interleaved over rounds, and set beside what the database reported."""

import json
import math
from pathlib import Path

import pytest
from benchmark_files import load_benchmark

remeasure = load_benchmark("remeasure")
DB = str(Path(__file__).resolve().parent / "fixtures/tiny_records/llvm-sapphirerapids-2c/matmul_e87e4aed")


def test_the_best_records_are_measured_again_and_set_beside_the_reported(tmp_path, capsys):
    (workload, records), *_ = remeasure.best_records(DB, 3).items()
    assert len(records) == 3 and records[0].latency <= records[1].latency <= records[2].latency
    out = remeasure.main(
        ["--databases", f"[{DB}]", "--target", '{"kind": "llvm", "num-cores": 2}', "--top", "2", "--rounds", "2",
         "--min-repeat-ms", "5", "--json", str(tmp_path / "r.json")]
    )  # fmt: skip
    got = out[DB][workload]
    assert got["reported_us"] == pytest.approx(records[0].latency * 1e6)
    assert 0 < got["remeasured_us"] <= got["of_reported_best_us"] < math.inf  # the best of two, one of them
    assert json.loads((tmp_path / "r.json").read_text()) == out
    assert f"| {DB} | {workload} | {got['reported_us']:.3f} |" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        remeasure.main(["--databases", f"[{DB}]", "--top", "0"])
