"""train.py (LightningCLI) end to end on real HDF5 shards: configs, fit/test, finetune, W&B, 2-process DDP."""

import contextlib
import csv
import io
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch

from data.datamodule import ShardDataModule
from data.shards import read_shards, write_shard
from data.synthetic import write_synthetic_shards
from pruner_lightning.config_files import config_dir
from pruner_models.module import MoAModule, PAMModule, load_net
from train import main

REPO = Path(__file__).resolve().parents[1]
EMBEDDED = REPO / "data" / "embedded" / "llvm-sapphirerapids-2c"
LEARNED_TASKS = ("fused_matmul", "matmul1_", "matmul2_", "fused_softmax")  # 5 + 1 + 1 + 1 tasks
MODEL_CONFIGS = sorted(c for c in config_dir().glob("*.yaml") if c.stem != "gpu")  # gpu.yaml: an overlay
TINY = ["--model.init_args.net.stmt_hidden", "32", "--model.init_args.net.fuse_hidden", "32"]
TINY_PAM = TINY + ["--model.init_args.net.gemm_embed", "16", "--model.init_args.net.heads", "2"]
QUIET = ["--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    path = tmp_path_factory.mktemp("shards")
    write_synthetic_shards(path, num_shards=2, num_tasks=6, records_per_task=40)
    return path


def _fit_args(config, shards, root, *extra):
    return [
        "fit",
        "--config",
        config,  # a packaged config by file name (pruner_lightning/configs)
        "--data.shards",
        str(shards),
        "--data.batch_size",
        "48",
        "--trainer.max_epochs",
        "2",
        "--trainer.accelerator",
        "cpu",
        "--trainer.logger.init_args.save_dir",
        str(root),
        *QUIET,
        *extra,
    ]


def _last_val_row(metrics_csv):
    rows = [r for r in csv.DictReader(open(metrics_csv)) if r.get("val_pairwise_acc")]
    return rows[-1]


@pytest.mark.parametrize("config", MODEL_CONFIGS, ids=[c.stem for c in MODEL_CONFIGS])
def test_every_config_loads(config, shards, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cli = main(["--config", str(config), "--data.shards", str(shards)], run=False)
    assert isinstance(cli.datamodule, ShardDataModule)
    assert cli.model.hparams.lr == pytest.approx(7e-4)
    monitors = sorted(
        (type(c).__name__, str(c.monitor), c.mode) for c in cli.trainer.callbacks if hasattr(c, "monitor")
    )
    assert monitors == [
        ("EarlyStopping", "val_pairwise_acc", "max"),
        ("ModelCheckpoint", "None", "min"),  # last.ckpt after every epoch, for resuming
        ("ModelCheckpoint", "val_pairwise_acc", "max"),
    ]
    averages = [
        c.init_args.decay for c in cli.config.trainer.callbacks or [] if c.class_path.endswith("EMAWeightAveraging")
    ]
    assert averages == ([0.99] if config.stem == "pam" else []), averages
    assert sum(type(c).__name__ == "EMAWeightAveraging" for c in cli.trainer.callbacks) == len(averages)
    # PAM's averaged curve keeps rising past epoch 50: its schedule is twice the published one
    patience = [c.patience for c in cli.trainer.callbacks if type(c).__name__ == "EarlyStopping"]
    assert (cli.trainer.max_epochs, patience) == ((100, [20]) if config.stem == "pam" else (50, [10]))
    if config.stem == "finetune":
        assert cli.model.hparams.optimizer == "sgd" and cli.trainer.gradient_clip_val is None
    if config.stem == "moa":
        assert isinstance(cli.model, MoAModule) and cli.model.hparams.momentum == 0.99


def test_gpu_overlay_is_the_measured_winner(shards, tmp_path, monkeypatch):
    """`--config pam --config gpu` keeps PAM and takes the batch size and learning rate that won the
    committed H100 sweep (benchmarks/results/batch_size/h100_10k.json), not numbers typed by hand."""
    import json

    sweep = json.loads((Path(__file__).parents[1] / "benchmarks/results/batch_size/h100_10k.json").read_text())
    won = sweep["summary"][sweep["winner"]]
    assert won["train_s_to_target"] == min(
        c["train_s_to_target"] for c in sweep["summary"].values() if c["train_s_to_target"] is not None
    )
    monkeypatch.chdir(tmp_path)
    cpu = ["--trainer.accelerator", "cpu", "--trainer.precision", "32-true"]  # no GPU here
    cli = main(["--config", "pam", "--config", "gpu", "--data.shards", str(shards), *cpu], run=False)
    assert isinstance(cli.model, PAMModule) and cli.model.hparams.loss == "lambdarank"
    assert cli.datamodule.hparams.batch_size == won["batch_size"]
    assert cli.model.hparams.lr == pytest.approx(won["lr"], rel=1e-3)
    assert cli.datamodule.hparams.data_on_device is True
    assert cli.trainer.max_epochs == 400
    assert [c.patience for c in cli.trainer.callbacks if type(c).__name__ == "EarlyStopping"] == [60]
    averages = [c.init_args.decay for c in cli.config.trainer.callbacks if c.class_path.endswith("EMAWeightAveraging")]
    assert averages == [0.92], "the overlay replaces pam.yaml's weight average"


@pytest.fixture(scope="module")
def pam_run(shards, tmp_path_factory):
    """`train.py fit` with configs/pam.yaml (tiny net), in process; returns the run folder."""
    root = tmp_path_factory.mktemp("runs")
    L.seed_everything(0)
    with contextlib.redirect_stdout(io.StringIO()) as out:
        main(_fit_args("pam.yaml", shards, root, *TINY_PAM))
    (root / "fit_stdout.txt").write_text(out.getvalue())
    return root / "pam" / "version_0"


def test_fit_reports_its_best_checkpoint_and_plots_its_curve(pam_run):
    printed = (pam_run.parents[1] / "fit_stdout.txt").read_text()
    best = re.search(r"best val_pairwise_acc: ([0-9.]+)  checkpoint: (\S+)", printed)
    assert best, printed[-2000:]
    assert Path(best.group(2)) == next((pam_run / "checkpoints").glob("best-epoch=*.ckpt"))
    logged = [
        float(r["val_pairwise_acc"]) for r in csv.DictReader(open(pam_run / "metrics.csv")) if r.get("val_pairwise_acc")
    ]
    assert float(best.group(1)) == pytest.approx(max(logged), abs=1e-4)
    curve = pam_run / "training_curve.png"
    assert f"training curve: {curve}" in printed
    assert curve.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and curve.stat().st_size > 10_000


def test_predict_is_not_a_subcommand(capsys):
    with pytest.raises(SystemExit):
        main(["predict", "--help"])
    assert "predict" in capsys.readouterr().err


def test_runs_without_a_logger_each_keep_their_own_config(pam_run, shards, tmp_path):
    args = ["--config", str(pam_run / "config.yaml"), "--trainer.logger", "false", *QUIET]
    args += ["--trainer.default_root_dir", str(tmp_path), "--ckpt_path", str(pam_run / "checkpoints" / "last.ckpt")]
    main(["test", *args, "--data.batch_size", "48"])
    main(["test", *args, "--data.batch_size", "64"])
    first, second = (tmp_path / "test" / f"version_{n}" / "config.yaml" for n in (0, 1))
    assert "batch_size: 48" in first.read_text() and "batch_size: 64" in second.read_text()
    assert not (tmp_path / "config.yaml").exists()


def test_fit_then_test_prints_the_metric_table(pam_run, shards, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert (pam_run / "checkpoints" / "last.ckpt").exists() and (pam_run / "config.yaml").exists()
    assert len(list((pam_run / "checkpoints").glob("best-epoch=*.ckpt"))) == 1
    row = _last_val_row(pam_run / "metrics.csv")
    assert 0.0 <= float(row["val_pairwise_acc"]) <= 1.0 and float(row["val_peak@1"]) > 0
    capsys.readouterr()
    main(
        [
            "test",
            "--config",
            str(pam_run / "config.yaml"),
            "--ckpt_path",
            str(pam_run / "checkpoints" / "last.ckpt"),
            "--trainer.logger",
            "false",
        ]
    )
    out = capsys.readouterr().out
    assert "test_pairwise_acc" in out and "test_peak@1" in out and "┃" in out  # the rich table


def test_finetune_flag_keeps_the_pretrained_normalization(pam_run, shards, tmp_path):
    data = read_shards(shards)
    data.stmt *= 3.0
    data.gemm *= 3.0
    write_shard(tmp_path / "other_device.h5", data, {"source": "test"})
    pretrained = pam_run / "checkpoints" / "last.ckpt"
    main(
        _fit_args(
            "finetune.yaml",
            tmp_path / "other_device.h5",
            tmp_path,
            *TINY_PAM,
            "--model.init_args.init_from",
            str(pretrained),
            "--trainer.max_epochs",
            "1",
        )
    )
    tuned = load_net(str(tmp_path / "finetune" / "version_0" / "checkpoints" / "last.ckpt"))
    before = load_net(str(pretrained))
    torch.testing.assert_close(tuned.stmt_scale, before.stmt_scale)
    torch.testing.assert_close(tuned.access_scale, before.access_scale)
    assert not all(torch.equal(a, b) for a, b in zip(tuned.parameters(), before.parameters()))  # it trained


def test_wandb_offline_run_leaves_its_files(shards, tmp_path):
    """A user's run: train.py in its own process, so the files are what W&B left when it exited."""
    pytest.importorskip("wandb")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO), WANDB_MODE="offline", WANDB_SILENT="true")
    args = _fit_args(
        "mlp.yaml",
        shards,
        tmp_path,
        "--model.init_args.net.hidden",
        "16",
        "--trainer.max_epochs",
        "1",
        "--trainer.logger",
        "lightning.pytorch.loggers.WandbLogger",
        "--trainer.logger.init_args.save_dir",
        str(tmp_path),
        "--trainer.logger.init_args.offline",
        "true",
        "--trainer.logger.init_args.project",
        "pruner-test",
    )
    proc = subprocess.run(
        [sys.executable, str(REPO / "train.py"), *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1, list(tmp_path.rglob("*"))
    data_files = list(runs[0].glob("run-*.wandb"))
    assert len(data_files) == 1
    recorded = data_files[0].read_bytes()  # the run's protobuf log: metrics and hyper-parameters
    assert b"val_pairwise_acc" in recorded and b"weight_decay" in recorded
    run_id = runs[0].name.rsplit("-", 1)[1]
    own = tmp_path / "pruner-test" / run_id  # save_dir/project/run id, where its checkpoints go
    assert (own / "config.yaml").exists() and (own / "training_curve.png").exists(), list(tmp_path.rglob("*.yaml"))
    assert not (tmp_path / "config.yaml").exists()


def test_ddp_two_processes_on_cpu_sync_metrics_exactly(shards, tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    args = _fit_args(
        "pam.yaml",
        shards,
        tmp_path,
        *TINY_PAM,
        "--data.batch_size",
        "32",
        "--trainer.devices",
        "2",
        "--trainer.strategy",
        "ddp",
    )
    proc = subprocess.run(
        [sys.executable, str(REPO / "train.py"), *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "MEMBER: 2/2" in proc.stderr + proc.stdout  # two processes joined the gloo group
    run = tmp_path / "pam" / "version_0"
    logged = _last_val_row(run / "metrics.csv")
    # the same checkpoint, validated by one process on the same validation split
    dm = ShardDataModule(str(shards), batch_size=32)
    module = PAMModule.load_from_checkpoint(run / "checkpoints" / "last.ckpt")
    trainer = L.Trainer(
        accelerator="cpu", devices=1, logger=False, enable_progress_bar=False, enable_model_summary=False
    )
    single = trainer.validate(module, dm, verbose=False)[0]
    assert len(dm.val_dataloader()) >= 2  # the 2 ranks each scored part of the validation records
    for name in ("val_pairwise_acc", "val_peak@1", "val_peak@5", "val_kendall_tau", "val_rmse", "val_loss"):
        assert float(logged[name]) == pytest.approx(single[name], rel=1e-5, abs=1e-6), name


def test_pam_learns_the_embedded_measured_cpu_dataset(tmp_path):
    """Real measurements: featurize 8 tasks of the embedded llvm dataset, train, rank unseen records.
    The 7 matmul tasks and the softmax: their 48 schedules each replay and featurize in about a third
    of a convolution's time (the fit learns them as well: test pairwise 0.64 against 0.47 untrained)."""
    from data.featurize import main as featurize  # TVM: replays the measured schedules

    tasks = [d for d in sorted(EMBEDDED.iterdir()) if d.name.startswith(LEARNED_TASKS) and d.is_dir()]
    assert len(tasks) == 8 and all(any(f.stat().st_size for f in d.iterdir()) for d in tasks), tasks
    records = tmp_path / "records" / EMBEDDED.name
    for task in tasks:
        shutil.copytree(task, records / task.name)
    shutil.copy(EMBEDDED / "index.json", records)
    assert featurize([str(records), "--out", str(tmp_path / "shards"), "--workers", "2"]).kept >= 200
    L.seed_everything(0)
    main(
        _fit_args(
            "pam.yaml",
            tmp_path / "shards",
            tmp_path,
            *TINY_PAM,
            "--model.init_args.lr",
            "3e-3",
            "--data.batch_size",
            "64",
            "--data.test_fraction",
            "0.3",
            "--data.val_fraction",
            "0.15",
            "--trainer.max_epochs",
            "20",
            "--early_stopping.patience",
            "100",
        )
    )
    last = tmp_path / "pam" / "version_0" / "checkpoints" / "last.ckpt"
    args = ["--config", str(tmp_path / "pam" / "version_0" / "config.yaml"), "--trainer.logger", "false"]
    trained = main(["test", *args, "--ckpt_path", str(last)]).trainer.callback_metrics
    untrained = main(["test", *args]).trainer.callback_metrics
    # about 10 held-out records in each of 8 tasks: random ranking scores 0.5 +- 0.05
    assert trained["test_pairwise_acc"] > 0.58, dict(trained)
    assert trained["test_pairwise_acc"] > untrained["test_pairwise_acc"] + 0.05, (dict(trained), dict(untrained))
