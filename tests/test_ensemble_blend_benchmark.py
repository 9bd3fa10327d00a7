"""benchmarks/ensemble_blend.py: PAM checkpoints alone, ensembled and blended with PSA, on real fits."""

import json

import numpy as np
import pytest
from benchmark_files import load_benchmark
from test_quality_benchmark import TINY_PAM

from data.shards import write_shard
from data.synthetic import synthetic_shard_data

quality = load_benchmark("quality")
ensemble_blend = load_benchmark("ensemble_blend")

METRICS = ("test_pairwise_acc", "test_peak@1", "test_kendall_tau")


def test_rows_of_checkpoints_ensembles_and_psa_blends(tmp_path):
    """A checkpoint's row is the same in every group; an ensemble of one checkpoint twice ranks as
    it; PSA weight 0 ranks as the model, a huge weight as PSA alone; the rows go to JSON."""
    from bridge.psa import get_device, psa_scores

    data = synthetic_shard_data(num_tasks=6, records_per_task=40)
    data.task_target = np.array([json.dumps({"kind": "cuda", "arch": "sm_90a"})] * data.num_tasks)
    no_work = np.isinf(psa_scores(data.psa_programs(), get_device("h100")))  # PSA ties: failed records
    data.latency[no_work], data.label[no_work] = np.inf, 0.0
    write_shard(tmp_path / "cuda.h5", data, {"source": "test"})
    shards, test_networks = str(tmp_path / "cuda.h5"), sorted(set(",".join(data.task_networks).split(",")) - {""})[:1]
    argv = ["--shards", shards, "--split", "hold-out", "--test-networks", *test_networks, "--psa-device", "h100"]
    fitted = quality.main(
        [
            *argv,
            "--models",
            "psa",
            "pam",
            "--seed",
            "0",
            "1",
            "--epochs",
            "2",
            "--out",
            str(tmp_path / "q"),
            "--",
            *TINY_PAM,
        ]
    )
    first, second = map(str, sorted((tmp_path / "q").glob("pam/version_*/checkpoints/best-*.ckpt")))

    out = tmp_path / "rows.json"
    groups = {"a": [first], "b": [first, second], "twice": [first, first]}
    rows = ensemble_blend.ensemble_blend(shards, test_networks, groups, psa_weights=[0.0, 1e6], json_out=str(out))
    assert {
        "a 0",
        "b 0",
        "b 1",
        "b ensemble (2)",
        "twice ensemble (2)",
        "all ensemble (2)",
        "b ensemble (2) + psa 1e+06",
    } <= set(rows)
    psa = fitted["per_seed"][0]["psa"]
    for metric in METRICS:
        assert rows["b 0"][metric] == rows["a 0"][metric], metric
        assert rows["twice ensemble (2)"][metric] == pytest.approx(rows["a 0"][metric], abs=1e-9), metric
        assert rows["a 0 + psa 0"][metric] == pytest.approx(rows["a 0"][metric], abs=1e-9), metric
        assert rows["b ensemble (2) + psa 1e+06"][metric] == pytest.approx(psa[metric], abs=1e-6), metric
    assert rows["a 0"]["test_pairwise_acc"] != pytest.approx(rows["b 1"]["test_pairwise_acc"], abs=1e-9)
    assert json.loads(out.read_text()) == {"checkpoints": groups, "rows": rows}
    with pytest.raises(ValueError, match="every group needs at least one checkpoint"):
        ensemble_blend.ensemble_blend(shards, test_networks, {"a": []})
