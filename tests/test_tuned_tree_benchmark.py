"""benchmarks/tuned_tree.py: tuned databases written as a record tree, held-out workloads left out."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from benchmark_files import load_benchmark

from data.record_tree import read_index
from data.records import read_records

tuned_tree = load_benchmark("tuned_tree")

FIXTURE = Path(__file__).parent / "fixtures" / "tiny_records" / "llvm-sapphirerapids-2c"


def _arm(src: Path, dest: Path, scale: float) -> None:
    """A tuning arm's database: the fixture task's, its latencies times `scale`."""
    dest.mkdir(parents=True)
    shutil.copy(src / "database_workload.json", dest / "database_workload.json")
    lines = []
    for line in (src / "database_tuning_record.json").read_text().splitlines():
        wl, body = json.loads(line)
        body[1] = [s * scale for s in body[1]]
        lines.append(json.dumps([wl, body]))
    (dest / "database_tuning_record.json").write_text("\n".join(lines) + "\n")


def test_a_tree_of_tuned_records_merges_remeasured_schedules_and_leaves_held_out_workloads_out(tmp_path):
    # two arms measured the matmul's schedules (the second at twice the latency), one the conv2d
    suite = tmp_path / "suite"
    _arm(FIXTURE / "matmul_e87e4aed", suite / "matmul" / "xgb-s0", 1.0)
    _arm(FIXTURE / "matmul_e87e4aed", suite / "matmul" / "pruner-s0", 2.0)
    shutil.copytree(FIXTURE / "conv2d_nhwc_e7d8f54e", suite / "conv2d" / "xgb-s0")
    # the tree the output is like: its conv2d belongs to the held-out network
    like = tmp_path / "like" / FIXTURE.name
    shutil.copytree(FIXTURE, like)
    index = read_index(like)
    index["tasks"]["conv2d_nhwc_e7d8f54e"]["networks"] = ["held"]
    (like / "index.json").write_text(json.dumps(index))
    (original,) = [t for t in read_records([FIXTURE / "matmul_e87e4aed"], failed="drop").tasks.values()]
    n = len(original.records)
    out = tmp_path / "tree"

    report = tuned_tree.tuned_tree(
        str(out), per_workload=5, arms=[str(suite / "*" / "*")], like=str(like), without_networks=["held"]
    )

    assert report["arms"] == 3 and report["held_out_records"] > 0
    (task,) = [k for k in report if k.startswith("tuned_")]
    assert task == "tuned_matmul_e87e4aed" and report[task]["measured"] == 2 * n and report[task]["distinct"] == n
    assert report[task]["written"] == 5
    written = read_records([out], failed="drop")
    (back,) = written.tasks.values()
    assert back.networks == ("suite_tuned",) and len(back.records) == 5
    # each written schedule's latency is the median of its two measurements: 1.5x the fixture's
    first = {json.dumps(r.trace, sort_keys=True): r.latency for r in original.records}
    for record in back.records:
        assert record.latency == pytest.approx(1.5 * first[json.dumps(record.trace, sort_keys=True)])
    # one record from each fifth of the latency ranking: the written span reaches both ends' strata
    ranked = np.sort([1.5 * lat for lat in first.values()])
    edges = np.linspace(0, n, 6).astype(int)
    lats = sorted(r.latency for r in back.records)
    for i, lat in enumerate(lats):
        assert ranked[edges[i]] <= lat * (1 + 1e-9) and lat <= ranked[edges[i + 1] - 1] * (1 + 1e-9)
    assert json.loads((out / "tuned_tree.json").read_text()) == report
    with pytest.raises(FileExistsError):  # never written over
        tuned_tree.tuned_tree(str(out), arms=[str(suite / "*" / "*")], like=str(like))
    with pytest.raises(ValueError, match="no database folder matches"):
        tuned_tree.tuned_tree(str(tmp_path / "none"), arms=[str(tmp_path / "nothing" / "*")], like=str(like))
