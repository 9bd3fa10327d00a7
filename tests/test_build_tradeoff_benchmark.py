"""benchmarks/build_tradeoff.py on real CUDA tuning databases of the H200 suite: schedules estimated,
then built with real NVRTC on the host (no GPU)."""

import json

import pytest
from benchmark_files import REPO, load_benchmark

from data.records import read_records
from tvm_env import nvrtc

build_tradeoff = load_benchmark("build_tradeoff")
CONV = REPO / "benchmarks" / "results" / "suite_databases" / "ablations" / "moa_src256" / "conv2d_1x35x35x64x96x3x1x1"

needs_cuda = pytest.mark.skipif(
    not nvrtc.has_headers(),
    reason="needs the CUDA toolkit's headers (CUDA_PATH or nvcc)",
)


@needs_cuda
def test_the_shares_saved_and_lost_at_each_limit(tmp_path):
    dbs = (str(CONV / "moa-s1"), str(CONV / "pruner-s1"))
    # 2 picks an arm and the 2 best: 6 NVRTC builds of a second or two (their estimates, 35 to 236 KB,
    # fall on both sides of several limits)
    out = build_tradeoff.build_tradeoff(databases=dbs, sample=2, best=2, json_out=tmp_path / "t.json")
    assert json.loads((tmp_path / "t.json").read_text()) == json.loads(json.dumps(out))
    (w,) = out["workloads"].values()  # the two arms pooled: one workload
    picks = [p for rows in w["arms"].values() for p in rows]
    assert set(w["arms"]) == {"moa-s1", "pruner-s1"} and len(picks) == 4
    for p in picks + w["best"]:
        assert p["build_s"] > 0 and p["estimated_kb"] > 1 and p["source_kb"] > 1 and p["unroll_step"] >= 0
    # the best are the pooled records' fastest, fastest first, with the databases' latencies
    records = [r for db in dbs for t in read_records([db]).tasks.values() for r in t.records if r.valid]
    assert [b["latency_us"] for b in w["best"]] == [
        r.latency * 1e6 for r in sorted(records, key=lambda r: r.latency)[:2]
    ]
    # shares fall as the limit rises, and reach none over a limit above every estimate
    for arm, rows in w["arms"].items():
        shares = w["summary"]["arms"][arm]
        total = sum(r["build_s"] for r in rows)
        for limit in build_tradeoff.LIMITS_KB:
            s = shares[str(limit)]
            over = [r for r in rows if r["estimated_kb"] > limit]
            assert s["picks_over"] == len(over) / len(rows)
            assert s["build_s_over"] == pytest.approx(sum(r["build_s"] for r in over) / total)
        assert [shares[str(k)]["picks_over"] for k in build_tradeoff.LIMITS_KB] == sorted(
            (shares[str(k)]["picks_over"] for k in build_tradeoff.LIMITS_KB), reverse=True
        )
    top = max(p["estimated_kb"] for p in picks + w["best"])
    s = build_tradeoff.tradeoff(picks, w["best"], (top,))[str(top)]
    assert s == {"picks_over": 0.0, "build_s_over": 0.0, "best_over": 0, "fastest_under_vs_fastest": 1.0}
    # under a limit below every estimate, nothing of the best is left
    low = build_tradeoff.tradeoff(picks, w["best"], (0.001,))["0.001"]
    assert low["picks_over"] == 1.0 and low["best_over"] == 2 and low["fastest_under_vs_fastest"] is None
    with pytest.raises(ValueError, match="--sample 1"):
        build_tradeoff.build_tradeoff(databases=dbs, sample=1)
