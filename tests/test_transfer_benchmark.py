"""benchmarks/transfer.py end to end on synthetic shards: pretrain without a network, then the four
rows (pretrained as is, scratch, finetune, MoA) on the same records of that network."""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from data.shards import read_shards, write_shard
from data.synthetic import synthetic_shard_data

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("transfer_benchmark", REPO / "benchmarks" / "transfer.py")
transfer = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(transfer)

# train.py flags after `--` reach every fit: --trainer.max_epochs 1 overrides --epochs 2 in all four
FAST = ["--", "--trainer.accelerator", "cpu", "--trainer.enable_progress_bar", "false", "--data.batch_size", "64",
        "--trainer.max_epochs", "1"]  # fmt: skip


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    path = tmp_path_factory.mktemp("shards")
    data = synthetic_shard_data(num_tasks=8, records_per_task=60, rows_per_record=(3, 4), seed=3)
    write_shard(path / "shard.h5", data, {"source": "test"})
    return path


def test_transfer_rows_share_one_split_of_the_target_network(shards, tmp_path, capsys):
    out = transfer.main(
        ["--shards", str(shards), "--target-network", "net_b", "--epochs", "2", "--out", str(tmp_path), *FAST]
    )
    assert list(out["results"]) == list(transfer.ROWS)
    data = read_shards(shards)
    valid = np.isfinite(data.latency)
    of_b = np.array(["net_b" in nets.split(",") for nets in data.task_networks])[data.record_task]
    sizes = out["sizes"][0]
    # every valid net_b record is in exactly one of the target splits; pretraining never saw them
    assert sizes["train"] + sizes["val"] + sizes["test"] == int((valid & of_b).sum())
    assert sizes["test"] == pytest.approx(0.6 * (valid & of_b).sum(), abs=8)
    assert sizes["pretrain_train_records"] < int((valid & ~of_b).sum())
    for row in transfer.ROWS:
        r = out["results"][row]
        assert 0.0 <= r["test_pairwise_acc"] <= 1.0 and r["train_s"] > 0, (row, r)
    assert out["results"]["pretrained"]["note"].startswith("pretrain: best epoch")
    assert "best epoch" in out["results"]["moa"]["note"]
    for row in ("pretrained", "scratch", "finetune", "moa"):
        assert "of 1," in out["results"][row]["note"], (row, out["results"][row]["note"])
    assert json.loads((tmp_path / "results.json").read_text())["target_network"] == "net_b"
    assert "| moa |" in capsys.readouterr().out
