"""benchmarks/source_size.py on a real CUDA tuning database of the H100 suite (no GPU, no NVRTC)."""

import json

from benchmark_files import REPO, load_benchmark

from data.records import read_records

source_size = load_benchmark("source_size")
DEPTHWISE = REPO / "benchmarks" / "results" / "suite_databases" / "depthwise_conv2d_1x28x28x240x5x1x2"


def test_sizes_of_sampled_and_fastest_schedules(tmp_path):
    dbs = [str(DEPTHWISE / "xgb-s0"), str(DEPTHWISE / "pruner-s0")]
    out = source_size.source_size(databases=tuple(dbs), sample=3, best=2, json_out=tmp_path / "s.json")
    assert json.loads((tmp_path / "s.json").read_text()) == json.loads(json.dumps(out))
    for db in dbs:
        row = out["databases"][db]
        assert row["sized"] == 3 and 1 < row["median_kb"] <= row["p90_kb"] <= row["max_kb"] < 4096
        assert 0 <= row["over_512_kb"] <= row["over_256_kb"] <= 1
    (fastest,) = out["fastest"].values()  # the two arms pooled: one workload
    records = [r for db in dbs for t in read_records([db]).tasks.values() for r in t.records]
    best = sorted(r.latency for r in records)[:2]
    assert [f["latency_us"] for f in fastest] == [b * 1e6 for b in best]
    assert all(f["source_kb"] > 1 for f in fastest)
