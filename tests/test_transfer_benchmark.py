"""benchmarks/transfer.py end to end on synthetic shards: pretrain without a network, then the four
rows (pretrained as is, scratch, finetune, MoA) on the same records of that network."""

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest
from benchmark_files import load_benchmark, small_shards

from data.shards import read_shards

transfer = load_benchmark("transfer")

# train.py flags after `--` reach every fit: --trainer.max_epochs 1 overrides --epochs 2 in all four
FAST = ["--", "--trainer.accelerator", "cpu", "--trainer.enable_progress_bar", "false", "--data.batch_size", "64",
        "--trainer.max_epochs", "1"]  # fmt: skip


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return small_shards(tmp_path_factory.mktemp("shards"))


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


@pytest.fixture(scope="module")
def target_shards(tmp_path_factory):
    """The same tasks (keys, networks) measured again: other records, 40 a task instead of 60 (another GPU)."""
    return small_shards(tmp_path_factory.mktemp("target_shards"), records_per_task=40, seed=4, source="test target")


def _valid_of(path: Path, network: str) -> tuple[int, int]:
    """(valid records of `network`'s tasks, valid records of the other tasks) of the shards at `path`."""
    data = read_shards(path)
    valid = np.isfinite(data.latency)
    of_net = np.array([network in nets.split(",") for nets in data.task_networks])[data.record_task]
    return int((valid & of_net).sum()), int((valid & ~of_net).sum())


def _transfer(args: list[str]) -> tuple[dict, str]:
    """`transfer.main(args)` and what it printed."""
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        out = transfer.main(args)
    return out, printed.getvalue()


@pytest.fixture(scope="module")
def transfer_runs(shards, target_shards, tmp_path_factory):
    """One run a `--pretrain-on` mode, pretrained on `shards`, adapted and tested on `target_shards`;
    {mode: (its result, what it printed, its --out folder)}. Run on first use: the `others` run is
    also the pretraining that `--pretrained` must match."""
    runs = {}

    def run(pretrain_on: str) -> tuple[dict, str, Path]:
        if pretrain_on not in runs:
            out = tmp_path_factory.mktemp(f"transfer_{pretrain_on}")
            args = ["--shards", str(shards), "--target-shards", str(target_shards), "--target-network", "net_b",
                    "--pretrain-on", pretrain_on, "--epochs", "2", "--out", str(out), *FAST]  # fmt: skip
            runs[pretrain_on] = (*_transfer(args), out)
        return runs[pretrain_on]

    return run


@pytest.mark.parametrize("pretrain_on", ["others", "all"])
def test_transfer_adapts_and_tests_on_the_target_shards(shards, target_shards, pretrain_on, transfer_runs):
    assert read_shards(shards).task_key.tolist() == read_shards(target_shards).task_key.tolist()
    out, printed, _ = transfer_runs(pretrain_on)
    assert (out["shards"], out["target_shards"], out["pretrain_on"]) == (str(shards), str(target_shards), pretrain_on)
    target_b, _ = _valid_of(target_shards, "net_b")
    source_b, source_rest = _valid_of(shards, "net_b")
    assert target_b != source_b  # 40 records a task against 60: the counts say which shards were split
    sizes = out["sizes"][0]
    # adaptation and test records: every valid net_b record of the TARGET shards, once
    assert sizes["train"] + sizes["val"] + sizes["test"] == target_b
    assert sizes["test"] == pytest.approx(0.6 * target_b, abs=8)
    # pretraining: the source shards, without net_b's tasks (others) or with them (all)
    pretrain = sizes["pretrain_train_records"] + sizes["pretrain_val_records"]
    assert pretrain == (source_rest if pretrain_on == "others" else source_rest + source_b)
    for row in transfer.ROWS:
        assert 0.0 <= out["results"][row]["test_pairwise_acc"] <= 1.0, row
    assert f"tested on {sizes['test']} of {target_shards}" in printed and "| moa |" in printed


def test_transfer_refuses_to_pretrain_on_the_test_records(shards, tmp_path, capsys):
    with pytest.raises(SystemExit):
        transfer.main(
            ["--shards", str(shards), "--target-network", "net_b", "--pretrain-on", "all", "--out", str(tmp_path)]
        )
    assert "--target-shards" in capsys.readouterr().err
    assert not (tmp_path / "results.json").exists()


def test_transfer_from_given_checkpoints_matches_its_own_pretraining(target_shards, transfer_runs, tmp_path, capsys):
    """`--pretrained` adapts the given checkpoint instead of pretraining: on the same target split,
    its `pretrained` row is the same model's, so the same numbers as the run that fitted it (the
    `--pretrain-on others` run, which is the default mode: the same flags but `--pretrain-on`)."""
    common = ["--target-shards", str(target_shards), "--target-network", "net_b", "--epochs", "2"]
    first, _, first_out = transfer_runs("others")
    (ckpt,) = (first_out / "seed0" / "pretrain").rglob("best-*.ckpt")
    again = transfer.main(["--pretrained", str(ckpt), *common, "--out", str(tmp_path / "b"), *FAST])
    assert again["pretrained"] == [str(ckpt)] and again["pretrain_on"] is None
    assert "pretrain_train_records" not in again["sizes"][0]
    assert {k: again["sizes"][0][k] for k in ("train", "val", "test")} == {
        k: first["sizes"][0][k] for k in ("train", "val", "test")
    }
    for metric in ("test_pairwise_acc", "test_peak@1", "test_kendall_tau"):
        assert again["results"]["pretrained"][metric] == pytest.approx(first["results"]["pretrained"][metric])
    assert again["results"]["pretrained"]["note"] == f"pretrain: given {ckpt}"
    assert f"pretrained on {ckpt}" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args, message",
    [
        (["--shards", "S", "--pretrained", "C"], "not both"),
        (["--pretrained", "C"], "needs --target-shards"),
        (["--pretrained", "C1", "C2", "--target-shards", "T", "--seed", "0", "1", "2"], "2 checkpoints for 3 seeds"),
        (["--pretrained", "missing.ckpt", "--target-shards", "T"], "missing.ckpt: no such file"),
    ],
)
def test_transfer_names_what_is_wrong_with_given_checkpoints(args, message, tmp_path, capsys):
    with pytest.raises(SystemExit):
        transfer.main([*args, "--target-network", "net_b", "--out", str(tmp_path)])
    assert message in capsys.readouterr().err
    assert not (tmp_path / "results.json").exists()
