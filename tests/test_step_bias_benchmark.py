"""benchmarks/step_bias.py on a featurized tuning database: each unroll step's share of the records,
of the fastest, and of each ranking's first, checked against the database's own records replayed."""

import math
from collections import Counter

import numpy as np
import pytest
from benchmark_files import REPO, load_benchmark

from benchmarks.build_profile import replay
from benchmarks.source_size import unroll_step
from bridge.psa import DEFAULT_FORMULA, get_device, psa_scores
from data.featurize import main as featurize_main
from data.records import read_records
from data.shards import read_shards

step_bias = load_benchmark("step_bias")
TASK = "tests/fixtures/tiny_records/llvm-sapphirerapids-2c/matmul_e87e4aed"


def _shares(steps):
    counts = Counter(steps)
    return {str(k): counts[k] / len(steps) for k in sorted(counts)}


def test_shares_of_the_records_the_fastest_and_each_rankings_first(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)  # record sources are the paths featurize was given
    featurize_main([TASK, "--out", str(tmp_path / "shards"), "--workers", "1"])
    out = step_bias.step_bias(
        str(tmp_path / "shards"),
        artifacts=("bridge/weights/pam-cuda-sm_90a.pt",),
        blend=(0.0, 1.0),
        top=0.25,
        json_out=tmp_path / "s.json",
    )
    (row,) = out["workloads"].values()
    records = [r for t in read_records([TASK]).tasks.values() for r in t.records if r.valid]
    steps = {r.source: unroll_step(replay(r)) for r in records}
    assert row["records"] == len(records) and row["top_k"] == math.ceil(0.25 * len(records))
    assert row["all"] == _shares(list(steps.values()))
    assert len(row["all"]) > 1, "the fixture's schedules carry several unroll steps"
    fastest = sorted(records, key=lambda r: r.latency)[: row["top_k"]]
    assert row["fastest"] == _shares([steps[r.source] for r in fastest])
    # PSA's first, from the shard's own PSA rows, in the shard's record order
    data = read_shards(str(tmp_path / "shards"))
    valid = np.flatnonzero(np.isfinite(np.asarray(data.latency, dtype=np.float64)))
    psa = psa_scores(data.psa_programs(), get_device("h100"), DEFAULT_FORMULA)[valid]
    first = valid[np.argsort(-psa, kind="stable")[: row["top_k"]]]
    assert row["rankings"][f"PSA {DEFAULT_FORMULA}"] == _shares([steps[str(data.record_source[i])] for i in first])
    model = row["rankings"]["model pam-cuda-sm_90a"]
    assert abs(sum(model.values()) - 1) < 1e-9 and set(model) <= set(row["all"])
    assert row["rankings"]["model pam-cuda-sm_90a + 0 PSA"] == model  # a blend without PSA keeps the model's order
    assert abs(sum(row["rankings"]["model pam-cuda-sm_90a + 1 PSA"].values()) - 1) < 1e-9
    with pytest.raises(ValueError, match="--top 0"):
        step_bias.step_bias(str(tmp_path / "shards"), top=0)


def test_a_record_missing_from_its_database_is_named(monkeypatch):
    monkeypatch.chdir(REPO)
    source = f"{TASK}/database_tuning_record.json:100000"
    with pytest.raises(ValueError, match="1 shard records are not in their databases, e.g. .*:100000"):
        step_bias.record_steps(np.array([source]))


def test_learners_rank_again_after_learning_a_runs_batches(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    featurize_main([TASK, "--out", str(tmp_path / "shards"), "--workers", "1"])
    artifact = "bridge/weights/pam-cuda-sm_90a.pt"
    records = sum(1 for line in open(f"{TASK}/database_tuning_record.json") if line.strip())
    out = step_bias.step_bias(
        str(tmp_path / "shards"),
        artifacts=(artifact,),
        top=0.25,
        adapt_on=TASK,
        adapt_variants=("moa-2", "pam"),
        adapt_batches=(1, 2, 1000),
        batch=8,
    )
    (row,) = out["workloads"].values()
    ranked = row["rankings"]
    assert {"moa-2 after 1 batches", "moa-2 after 2 batches", "pam after 1 batches", "pam after 2 batches"} <= set(
        ranked
    )
    assert not any("after 1000" in name for name in ranked), f"{records} records make no 1000 batches of 8"
    for name in ranked:
        assert abs(sum(ranked[name].values()) - 1) < 1e-9 and set(ranked[name]) <= set(row["all"])
    with pytest.raises(ValueError, match="psa does not learn"):
        step_bias.step_bias(str(tmp_path / "shards"), artifacts=(artifact,), adapt_on=TASK, adapt_variants=("psa",))
    with pytest.raises(ValueError, match="--adapt_batches"):
        step_bias.step_bias(str(tmp_path / "shards"), adapt_on=TASK, adapt_batches=(0,))
