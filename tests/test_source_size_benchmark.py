"""benchmarks/source_size.py on a real CUDA tuning database of the H100 suite (no GPU, no NVRTC)."""

import json

import pytest
from benchmark_files import REPO, load_benchmark

from data.records import read_records

source_size = load_benchmark("source_size")
DEPTHWISE = REPO / "benchmarks" / "results" / "suite_databases" / "depthwise_conv2d_1x28x28x240x5x1x2"


@pytest.fixture(scope="module")
def pruner_sized():
    """The pruner arm's database: 6 schedules sized, by unroll step, and estimated before the build
    (`estimate=True` adds its figures and changes none of the others)."""
    db = str(DEPTHWISE / "pruner-s0")
    return db, source_size.source_size(databases=(db,), sample=6, best=1, estimate=True)


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
    assert all("estimate" not in row for row in out["databases"].values())  # only when asked for


def test_sizes_split_by_unroll_step(pruner_sized):
    """Each sized schedule falls under its unroll step, which matches the annotation TVMScript prints;
    an unscheduled workload has none (step 0)."""
    import re

    from benchmarks.build_profile import replay

    db, out = pruner_sized
    row = out["databases"][db]
    split = row["by_unroll"]
    assert sum(u["sized"] for u in split.values()) == row["sized"] == 6
    assert abs(sum(u["share"] for u in split.values()) - 1) < 1e-9
    assert [int(k) for k in split] == sorted(int(k) for k in split)
    assert all(0 <= u["over_512_kb"] <= u["over_256_kb"] <= 1 and u["median_kb"] > 1 for u in split.values())
    records = [r for t in read_records([db]).tasks.values() for r in t.records]
    # each step's latencies are its picks' measured ones: the fastest of the steps is the sample's fastest
    sampled = source_size.random.Random(0).sample(records, 6)
    assert min(u["best_us"] for u in split.values()) == min(r.latency for r in sampled) * 1e6
    assert all(u["best_us"] <= u["median_us"] for u in split.values())
    (fastest,) = out["fastest"].values()
    assert fastest[0]["unroll_step"] == source_size.unroll_step(replay(min(records, key=lambda r: r.latency)))
    steps = set()
    for record in records[:8]:
        sch = replay(record)
        printed = [int(v) for v in re.findall(r'"pragma_auto_unroll_max_step": (\d+)', sch.mod.script())]
        assert source_size.unroll_step(sch) == max(printed, default=0)
        steps.add(source_size.unroll_step(sch))
    assert steps - {0}, "the pruner arm's schedules carry unroll annotations"
    ms = source_size.tvm.s_tir.meta_schedule
    bare = source_size.tvm.s_tir.Schedule(ms.database.Workload.from_json(records[0].workload.as_json()).mod)
    assert source_size.unroll_step(bare) == 0


def test_the_estimate_before_the_build_follows_the_sizes(pruner_sized):
    db, out = pruner_sized
    e = out["databases"][db]["estimate"]
    assert e["sized"] == out["databases"][db]["sized"] == 6
    assert 0.3 < e["ratio_p10"] <= e["ratio_median"] <= e["ratio_p90"] < 3 and -1 <= e["r_log"] <= 1
    assert e["ms_median"] > 0 and e["source_ms_median"] > 0
    for k in source_size.LIMITS_KB:
        over = e[f"over_{k}_kb"]
        assert over["both"] <= min(over["real"], over["estimated"]) <= 6
    # without `estimate`: no estimate figures (test_sizes_of_sampled_and_fastest_schedules)
