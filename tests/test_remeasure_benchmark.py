"""benchmarks/remeasure.py on real llvm records: each database's best records are built and measured
again here, interleaved over rounds, and set beside what the database reported."""

import json
import math
import os
from pathlib import Path

import pytest
from benchmark_files import load_benchmark, twin_database

remeasure = load_benchmark("remeasure")
DB = str(Path(__file__).resolve().parent / "fixtures/tiny_records/llvm-sapphirerapids-2c/matmul_e87e4aed")


def test_the_best_records_are_measured_again_and_set_beside_the_reported(tmp_path, capsys, make_builder):
    from tvm_env import ms, parse_target, setup

    target = parse_target({"kind": "llvm", "num-cores": 2})
    setup(target)
    kept = remeasure.best_kernels([DB], 3, target, make_builder(max_workers=2))
    workload = kept[0][1]
    records = [record for _, _, record, _, _ in kept]
    assert len(records) == 3 and records[0].latency <= records[1].latency <= records[2].latency
    assert all(os.path.isfile(path) for *_, path in kept)  # the builds it kept, to be measured
    for *_, path in kept:
        ms.utils.remove_build_dir(path)
    out = remeasure.main(  # --timer graph: a CPU build is timed by the evaluator, so it runs here too
        ["--databases", f"[{DB}]", "--target", '{"kind": "llvm", "num-cores": 2}', "--top", "2", "--rounds", "2",
         "--min-repeat-ms", "5", "--timer", "graph", "--json", str(tmp_path / "r.json")]
    )  # fmt: skip
    got = out[DB][workload]
    assert got["reported_us"] == pytest.approx(records[0].latency * 1e6)
    assert 0 < got["remeasured_us"] <= got["of_reported_best_us"] < math.inf  # the best of two, one of them
    assert [k["reported_us"] for k in got["kernels"]] == pytest.approx([r.latency * 1e6 for r in records[:2]])
    assert all(len(k["readings_us"]) == 2 for k in got["kernels"])  # a reading a round
    medians = [sorted(k["readings_us"])[0] / 2 + sorted(k["readings_us"])[1] / 2 for k in got["kernels"]]
    assert got["remeasured_us"] == pytest.approx(min(medians)) and got["of_reported_best_us"] == pytest.approx(
        medians[0]
    )
    assert json.loads((tmp_path / "r.json").read_text()) == out
    assert f"| {DB} | {workload} | {got['reported_us']:.3f} |" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        remeasure.main(["--databases", f"[{DB}]", "--top", "0"])


def test_a_kernels_twins_are_left_out_of_the_best(tmp_path, make_builder):
    """A database whose second-best record is the best one's twin (the same kernel): the best two
    kernels are the best record's and the third's."""
    from tvm_env import ms, parse_target, setup

    target = parse_target({"kind": "llvm", "num-cores": 2})
    setup(target)
    kept = remeasure.best_kernels([str(twin_database(DB, tmp_path, target))], 2, target, make_builder(max_workers=2))
    assert [round(record.latency * 1e3, 6) for _, _, record, _, _ in kept] == [1.0, 3.0]
    for *_, path in kept:
        ms.utils.remove_build_dir(path)
