"""benchmarks/gate_replay.py: the verify gate replayed on a featurized tuning database."""

import numpy as np
from benchmark_files import REPO, load_benchmark

from data.featurize import main as featurize_main

gate_replay = load_benchmark("gate_replay")
TASK = "tests/fixtures/tiny_records/llvm-sapphirerapids-2c/matmul_e87e4aed"


def test_replay_follows_the_better_ranker():
    latency = np.tile(np.arange(1.0, 17.0), 6)  # six rounds of 16
    right, wrong = -latency, latency
    psa_better = gate_replay.replay(wrong, right, latency, 16)
    assert psa_better["rounds"] == 6 and psa_better["choices"] == "vPPPPP"  # 120 pairs a round: enough after one
    assert (psa_better["model_pairwise"], psa_better["psa_pairwise"]) == (0.0, 1.0)
    model_better = gate_replay.replay(right, wrong, latency, 16)
    assert model_better["choices"] == "vvvvvv" and model_better["psa_rounds"] == 0.0


def test_a_featurized_database_is_replayed_in_measurement_order(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)  # record sources are the paths featurize was given
    featurize_main([TASK, "--out", str(tmp_path / "shards"), "--workers", "1"])
    artifact = "bridge/weights/pam-cuda-sm_90a.pt"
    out = gate_replay.gate_replay(str(tmp_path / "shards"), (TASK,), artifact, batch=8)
    r = out[TASK]
    records = sum(1 for line in open(f"{TASK}/database_tuning_record.json") if line.strip())
    assert r["rounds"] == -(-records // 8) == len(r["choices"])
    assert 0.0 <= r["model_pairwise"] <= 1.0 and 0.0 <= r["psa_pairwise"] <= 1.0
    assert r["choices"][0] == "v"  # no batch seen before the first round
