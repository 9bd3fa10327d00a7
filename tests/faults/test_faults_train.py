"""Fault injection on training (issue 11, items 3, 10 and kill -9) on real shards: a diverging fit, a
NaN written into a shard, a split with too few tasks, a `kill -9` mid-fit.

train.py runs in a process of its own where the process is what is tested: the kill, and one fault's
exit status and single `error:` line without a traceback. The other faults run train.py as
`__main__` in this process (runpy: the same script, its error handling included, without the several
seconds of imports of a new process) and check the `SystemExit` that it ends with.
"""

import contextlib
import io
import os
import runpy
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from data.datamodule import ShardDataModule, SplitError
from data.shards import read_shards
from data.synthetic import write_synthetic_shards
from pruner_models.module import load_net

REPO = Path(__file__).resolve().parents[2]
TINY = [
    "--model.init_args.net.stmt_hidden=32",
    "--model.init_args.net.fuse_hidden=32",
    "--model.init_args.net.gemm_embed=16",
    "--model.init_args.net.heads=2",
]


def _train_cmd(shards, root, *extra):
    return [
        sys.executable,
        "train.py",
        "fit",
        "--config",
        str(REPO / "configs" / "pam.yaml"),
        f"--data.shards={shards}",
        "--data.batch_size=48",
        "--trainer.accelerator=cpu",
        f"--trainer.logger.init_args.save_dir={root}",
        f"--trainer.default_root_dir={root}",
        "--trainer.enable_progress_bar=false",
        "--trainer.enable_model_summary=false",
        *TINY,
        *extra,
    ]


def _train(shards, root, *extra, timeout=300):
    return subprocess.run(
        _train_cmd(shards, root, *extra), cwd=REPO, capture_output=True, text=True, timeout=timeout, env=_env()
    )


def _train_here(shards, root, *extra) -> str | int | None:
    """`_train`'s `python train.py fit ...` run as `__main__` in this process (its stdout dropped);
    the code of the SystemExit it ended with (None: it returned)."""
    argv = sys.argv
    sys.argv = ["train.py", *_train_cmd(shards, root, *extra)[2:]]
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            runpy.run_path(str(REPO / "train.py"), run_name="__main__")
    except SystemExit as end:
        return end.code
    finally:
        sys.argv = argv
    return None


def _env():
    return {**os.environ, "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    path = tmp_path_factory.mktemp("shards")
    write_synthetic_shards(path, num_shards=1, num_tasks=6, records_per_task=40)
    return path


def test_diverging_fit_stops_with_an_error_and_no_checkpoint(shards, tmp_path):
    error = _train_here(shards, tmp_path, "--trainer.max_epochs=3", "--model.init_args.lr=1e30")
    assert str(error).startswith("error: the training loss was NaN or inf in "), error  # exit 1, this line
    assert not list(tmp_path.rglob("*.ckpt")), "a diverged fit must leave no (best or last) checkpoint"


def test_nan_in_a_shard_stops_train_before_training(shards, tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    (src,) = shards.glob("*.h5")
    target = bad / src.name
    target.write_bytes(src.read_bytes())
    with h5py.File(target, "r+") as h5:
        stmt = h5["stmt"][()]
        stmt[3, 7] = np.nan
        h5["stmt"][...] = stmt
        label = h5["label"][()]
        label[5] = np.inf
        h5["label"][...] = label
    error = _train_here(bad, tmp_path / "runs", "--trainer.max_epochs=1")
    assert str(error).startswith(f"error: {target}: ") and "non-finite" in str(error), error
    assert not list(tmp_path.rglob("*.ckpt"))


def test_hold_out_with_too_few_tasks_falls_back_to_within_task_validation(tmp_path):
    """The reported crash: 6 tasks, one held out; 10% of 5 training tasks is no task."""
    write_synthetic_shards(tmp_path, num_shards=1, num_tasks=6, records_per_task=40)
    nets = read_shards(tmp_path).task_networks.tolist()
    held = sorted({n for row in nets for n in row.split(",") if n})[0]
    dm = ShardDataModule(str(tmp_path), split="hold-out", test_networks=[held], val_fraction=0.1)
    with pytest.warns(UserWarning, match="falls back to 10% of every training task's records"):
        dm.setup("fit")
    train_tasks = set(dm.record_task[dm.splits["train"]].tolist())
    assert len(dm.splits["val"]) and set(dm.record_task[dm.splits["val"]].tolist()) <= train_tasks
    assert not set(dm.record_task[dm.splits["test"]].tolist()) & train_tasks

    with pytest.warns(UserWarning, match="falls back to 10% of every training task's records"):
        ended = _train_here(
            tmp_path,
            tmp_path / "runs",
            "--trainer.max_epochs=2",
            "--data.split=hold-out",
            f"--data.test_networks=[{held}]",
            "--data.val_fraction=0.1",
        )
    assert ended is None, ended
    assert list((tmp_path / "runs").rglob("best-*.ckpt"))


def test_split_without_validation_records_fails_before_training(tmp_path):
    write_synthetic_shards(tmp_path, num_shards=1, num_tasks=2, records_per_task=4)
    dm = ShardDataModule(str(tmp_path), val_fraction=0.05, drop_failed=False)
    with pytest.raises(SplitError, match=r"val_fraction=0.05 left no validation records .* raise --data.val_fraction"):
        dm.setup("fit")
    result = _train(tmp_path, tmp_path / "runs", "--data.val_fraction=0.05", "--data.drop_failed=false")
    assert result.returncode == 1 and "error: val_fraction=0.05 left no validation records" in result.stderr
    assert "Traceback" not in result.stderr and not list(tmp_path.rglob("*.ckpt"))


def test_kill_9_mid_fit_then_resume_from_last_checkpoint(shards, tmp_path):
    root = tmp_path / "runs"
    ckpts = tmp_path / "ckpt"
    extra = [f"--checkpoint.dirpath={ckpts}", "--early_stopping.patience=1000"]
    proc = subprocess.Popen(
        _train_cmd(shards, root, "--trainer.max_epochs=1000", *extra),
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=_env(),
    )
    last = ckpts / "last.ckpt"
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        if last.exists() and torch.load(last, map_location="cpu", weights_only=True)["epoch"] >= 2:
            break
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
    killed_at = torch.load(last, map_location="cpu", weights_only=True)["epoch"]  # whole: written atomically
    assert killed_at >= 2 and not [p for p in ckpts.iterdir() if p.name.startswith(".")]

    # the resume needs no process of its own: what it reads is what the killed process left
    assert _train_here(shards, root, f"--trainer.max_epochs={killed_at + 3}", *extra, f"--ckpt_path={last}") is None
    final = torch.load(last, map_location="cpu", weights_only=True)
    assert final["epoch"] == killed_at + 2  # it went on from the killed epoch, not from 0
    net = load_net(str(last))
    assert all(torch.isfinite(p).all() for p in net.parameters())
