"""benchmarks/quality.py end to end on synthetic shards: one table of random / PSA / XGBModel / PAM rows."""

import csv
import json
import math
import sys

import numpy as np
import pytest
from benchmark_files import load_benchmark

from data.labels import normalized_throughput
from data.schema import STMT_DIM
from data.shards import ShardData, read_shards, write_shard
from data.synthetic import synthetic_shard_data

quality = load_benchmark("quality")

TINY_PAM = [
    "--model.init_args.net.stmt_hidden",
    "32",
    "--model.init_args.net.fuse_hidden",
    "32",
    "--model.init_args.net.gemm_embed",
    "16",
    "--model.init_args.net.heads",
    "2",
    "--data.batch_size",
    "48",
    "--trainer.accelerator",
    "cpu",
    "--trainer.enable_progress_bar",
    "false",
    "--trainer.enable_model_summary",
    "false",
]


def pack_sum_learnable(data: ShardData) -> ShardData:
    """The synthetic shard with latency = exp(-(w . sum of the program's statement rows)).

    data.synthetic's latency also depends on the GEMM matrix, which XGBModel never sees; here the
    label is what a pack-sum model on PerStoreFeature rows can learn (with a fixed number of rows
    per program: xgboost's base_score is added to every ROW, which biases programs by row count).
    """
    w = np.random.default_rng(7).normal(size=STMT_DIM) * (np.arange(STMT_DIM) % 10 == 0) / 50.0
    score = np.add.reduceat(data.stmt @ w, data.stmt_ptr[:-1])
    data.latency = np.where(np.isfinite(data.latency), np.exp(-score) * 1e-4, np.inf)
    data.label = np.zeros(data.num_records, dtype=np.float32)
    for task in range(data.num_tasks):
        mine = data.record_task == task
        data.label[mine] = normalized_throughput(data.latency[mine])
    return data


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    path = tmp_path_factory.mktemp("shards")
    for i in range(2):
        data = synthetic_shard_data(num_tasks=6, records_per_task=80, rows_per_record=(4, 5), seed=i, task_offset=6 * i)
        data = pack_sum_learnable(data)
        write_shard(path / f"shard_{i}.h5", data, {"source": "test"})
    return path


def test_one_run_scores_every_model_on_the_same_held_out_records(shards, tmp_path, capsys):
    argv = [
        "--shards",
        str(shards),
        "--split",
        "hold-out",
        "--test-networks",
        "net_a",
        "--epochs",
        "2",
        "--models",
        "random",
        "psa",
        "xgb",
        "pam",
        "pam+xgb",
        "--random-seeds",
        "3",
        "--xgb-threads",
        "1",
        "--out",
        str(tmp_path),
        "--",
        *TINY_PAM,
    ]
    out = quality.main(argv)
    printed = capsys.readouterr().out
    assert "XGB iter" in printed and "pairwise" in printed  # XGBModel's own progress lines, then the table

    results = out["results"]
    assert list(results) == ["random", "psa", "xgb", "pam", "pam+xgb"]
    # net_a: tasks 0, 4, 8 and the shared tasks 3, 7, 11 ("net_d,net_a"), minus failed records
    assert out["splits"][0]["test"] == {"records": len(_test_records(shards)), "tasks": 6}
    assert results["psa"]["note"].startswith("n/a on llvm") and math.isnan(results["psa"]["train_s"])
    assert abs(results["random"]["test_pairwise_acc"] - 0.5) < 0.05
    # The latency is a function of the summed statement rows: pack-sum XGBoost learns it.
    assert results["xgb"]["test_pairwise_acc"] > 0.7, results["xgb"]
    assert results["xgb"]["test_peak@5"] > results["random"]["test_peak@5"] + 0.15, results
    assert results["xgb"]["train_s"] > 0 and "rounds" in results["xgb"]["note"]
    assert 0.0 <= results["pam"]["test_pairwise_acc"] <= 1.0 and "best epoch" in results["pam"]["note"]
    assert results["pam+xgb"]["note"] == "pam's checkpoint + xgb's model, standardized per task"
    assert results["pam+xgb"]["train_s"] == 0.0 and 0.0 <= results["pam+xgb"]["test_pairwise_acc"] <= 1.0
    # the pair sums the two within each task: paired with its own scores, the checkpoint ranks alone
    data_args = ["--data.shards", str(shards), "--data.split", "hold-out", "--data.test_networks", '["net_a"]']
    dm = quality.reference_datamodule(quality.REPO / "configs" / "pam.yaml", data_args, TINY_PAM)
    (ckpt,) = map(str, tmp_path.glob("pam/version_*/checkpoints/best-*.ckpt"))
    pam = quality.checkpoint_test_scores(dm, ckpt)
    alone, paired = quality.test_metrics(pam, dm), quality.test_metrics(quality.pair_test_scores(dm, ckpt, pam), dm)
    for metric in ("test_pairwise_acc", "test_peak@1", "test_kendall_tau"):
        assert paired[metric] == pytest.approx(alone[metric], abs=1e-9), metric
    assert paired["test_pairwise_acc"] == pytest.approx(results["pam"]["test_pairwise_acc"], abs=1e-6)
    with pytest.raises(quality.Unavailable, match="needs the pam and xgb rows"):
        quality.pair_test_scores(dm, ckpt, None)

    assert json.loads((tmp_path / "results.json").read_text()) == json.loads(json.dumps(out))
    rows = list(csv.DictReader(open(tmp_path / "results.csv")))
    assert [r["model"] for r in rows] == list(results)
    assert float(rows[2]["test_peak@1"]) == pytest.approx(results["xgb"]["test_peak@1"])


def _test_records(shards):
    data = read_shards(shards)
    held = np.array(["net_a" in nets.split(",") for nets in data.task_networks])
    return np.flatnonzero(held[data.record_task] & np.isfinite(data.latency))


def test_xgb_row_is_n_a_without_xgboost(shards, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "xgboost", None)  # what an environment without xgboost looks like
    out = quality.main(
        [
            "--shards",
            str(shards),
            "--models",
            "xgb",
            "random",
            "--random-seeds",
            "1",
            "--seed",
            "0",
            "1",
            "--out",
            str(tmp_path),
        ]
    )
    assert out["results"]["xgb"]["note"] == "n/a: xgboost not installed (pip install xgboost)"
    assert "test_pairwise_acc" not in out["results"]["xgb"] and math.isnan(out["results"]["xgb"]["train_s"])
    # two seeds: two within-task splits, the table shows their mean and std
    random = [out["per_seed"][seed]["random"]["test_peak@1"] for seed in (0, 1)]
    assert random[0] != random[1]
    assert out["results"]["random"]["test_peak@1"] == pytest.approx(np.mean(random))
    assert out["results"]["random"]["test_peak@1_std"] == pytest.approx(np.std(random))
    assert len(list(csv.DictReader(open(tmp_path / "results.csv")))) == 2 * 2 + 2  # per seed, then the means


def test_psa_row_on_gpu_records_needs_a_device_row(tmp_path):
    data = synthetic_shard_data(num_tasks=4, records_per_task=20)
    data.task_target = np.array([json.dumps({"kind": "cuda", "arch": "sm_90a"})] * data.num_tasks)
    write_shard(tmp_path / "cuda.h5", data, {"source": "test"})
    common = ["--shards", str(tmp_path / "cuda.h5"), "--models", "psa", "--out", str(tmp_path / "out")]
    assert quality.main(common)["results"]["psa"]["note"].startswith("n/a: pass --psa-device")
    row = quality.main([*common, "--psa-device", "h100"])["results"]["psa"]
    assert row["note"] == "device h100" and 0.0 <= row["test_pairwise_acc"] <= 1.0 and row["test_peak@1"] > 0


def test_pam_psa_row_blends_the_pam_rows_checkpoint_with_psa(tmp_path):
    """Weight 0 ranks as the pam row does (pam+xgb+psa: as pam+xgb); a huge weight as the psa row
    does; without a pam row: n/a."""
    from bridge.psa import get_device, psa_scores

    data = synthetic_shard_data(num_tasks=6, records_per_task=40)
    data.task_target = np.array([json.dumps({"kind": "cuda", "arch": "sm_90a"})] * data.num_tasks)
    # programs whose PSA rows estimate no work tie at +inf: make them failed records, so that PSA
    # orders every test pair and a huge weight must reproduce its row exactly
    no_work = np.isinf(psa_scores(data.psa_programs(), get_device("h100")))
    assert no_work.sum() < 20
    data.latency[no_work], data.label[no_work] = np.inf, 0.0
    write_shard(tmp_path / "cuda.h5", data, {"source": "test"})
    common = ["--shards", str(tmp_path / "cuda.h5"), "--psa-device", "h100", "--epochs", "2"]
    rows = {}
    for weight in ("0", "1e6"):
        out = tmp_path / f"w{weight}"
        args = [
            *common,
            "--models",
            "psa",
            "xgb",
            "pam",
            "pam+psa",
            "pam+xgb",
            "pam+xgb+psa",
            "--xgb-threads",
            "1",
            "--psa-weight",
            weight,
            "--out",
            str(out),
            "--",
            *TINY_PAM,
        ]
        rows[weight] = quality.main(args)["results"]
    for metric in ("test_pairwise_acc", "test_peak@1", "test_kendall_tau"):
        assert rows["0"]["pam+psa"][metric] == pytest.approx(rows["0"]["pam"][metric], abs=1e-6), metric
        assert rows["1e6"]["pam+psa"][metric] == pytest.approx(rows["1e6"]["psa"][metric], abs=1e-6), metric
        # the pair with PSA: weight 0 ranks as the pair, a huge weight as PSA
        assert rows["0"]["pam+xgb+psa"][metric] == pytest.approx(rows["0"]["pam+xgb"][metric], abs=1e-6), metric
        assert rows["1e6"]["pam+xgb+psa"][metric] == pytest.approx(rows["1e6"]["psa"][metric], abs=1e-6), metric
    assert rows["0"]["pam"]["test_pairwise_acc"] != pytest.approx(rows["0"]["psa"]["test_pairwise_acc"], abs=1e-6)
    assert rows["0"]["pam+psa"]["note"].startswith("pam's checkpoint + 0 x PSA (h100)")
    assert rows["1e6"]["pam+xgb+psa"]["note"] == "pam's checkpoint + xgb's model + 1e+06 x PSA (h100), per task"
    alone = quality.main([*common, "--models", "pam+psa", "--out", str(tmp_path / "alone")])["results"]["pam+psa"]
    assert alone["note"] == "n/a: needs the pam row before it in --models" and "test_pairwise_acc" not in alone


def test_pam_ens_row_ensembles_the_pam_checkpoints_of_every_seed(shards, tmp_path):
    """One row for the run from the seeds' pam checkpoints; an ensemble of one checkpoint twice ranks
    as that checkpoint; n/a with one checkpoint or with test records that differ between seeds."""
    hold_out = ["--shards", str(shards), "--split", "hold-out", "--test-networks", "net_a", "--epochs", "2"]
    argv = [*hold_out, "--seed", "0", "1", "--models", "pam", "pam-ens", "--out", str(tmp_path), "--", *TINY_PAM]
    out = quality.main(argv)
    ens = out["results"]["pam-ens"]
    assert list(out["results"]) == ["pam", "pam-ens"] and "pam-ens" not in out["per_seed"][0]
    assert ens["note"] == "mean of the pam checkpoints of seeds 0, 1, standardized per task"
    assert 0.0 <= ens["test_pairwise_acc"] <= 1.0 and "test_pairwise_acc_std" not in ens

    data_args = ["--data.shards", str(shards), "--data.split", "hold-out", "--data.test_networks", '["net_a"]']
    dm = quality.reference_datamodule(quality.REPO / "configs" / "pam.yaml", data_args, TINY_PAM)
    checkpoints = sorted(tmp_path.glob("pam/version_*/checkpoints/best-*.ckpt"))
    assert len(checkpoints) == 2
    test = dm.splits["test"]
    from bridge.evaluate import score_records
    from bridge.export import load_model

    alone = quality.test_metrics(score_records(load_model(checkpoints[0]).net, dm.store, indices=test), dm)
    twice = quality.ensemble_row(dm, {0: test, 1: test}, {0: str(checkpoints[0]), 1: str(checkpoints[0])})
    for metric in ("test_pairwise_acc", "test_peak@1", "test_kendall_tau"):
        assert twice[metric] == pytest.approx(alone[metric], abs=1e-9), metric
    with pytest.raises(quality.Unavailable, match="at least two"):
        quality.ensemble_row(dm, {0: test}, {0: str(checkpoints[0])})
    with pytest.raises(quality.Unavailable, match="test records differ"):
        quality.ensemble_row(dm, {0: test, 1: test[1:]}, {0: str(checkpoints[0]), 1: str(checkpoints[1])})
