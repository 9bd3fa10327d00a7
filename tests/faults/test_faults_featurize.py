"""Fault injection on the featurizer (issue 11, items 3, 7, 11 and kill -9): real shard files with the
fault written in, the real CLI in its own process, and a real `kill -9` in the middle of a run."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from data.featurize import main as featurize
from data.shards import ShardError, read_manifest, read_shard, read_shards
from data.synthetic import write_synthetic_shards

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "fixtures" / "tiny_records"
DEVICE = "llvm-sapphirerapids-2c"
MATMUL = "matmul_e87e4aed"
CONV = "conv2d_nhwc_e7d8f54e"


def _cli(*args, timeout=120):
    """`python -m data.featurize ARGS` in its own process."""
    return subprocess.run(
        [sys.executable, "-m", "data.featurize", *map(str, args)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "TVM_NUM_THREADS": "1"},
    )


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "tree"
    shutil.copytree(FIXTURE, root)
    return root


def _cut(root: Path, n: int) -> Path:
    """Keep the first n records of the matmul task."""
    plain = root / DEVICE / MATMUL / "database_tuning_record.json"
    plain.write_text("".join(plain.read_text().splitlines(keepends=True)[:n]))
    return root


# item 3 (data side): NaN and inf in a shard ----------------------------------------------------


@pytest.mark.parametrize(
    "field, index, value, message",
    [
        ("stmt", (5, 3), np.nan, "stmt has 1 non-finite (NaN or inf) value(s), the first in record "),
        ("label", (7,), np.inf, "label has 1 non-finite or outside [0, 1] value(s), the first in record 7 ("),
        ("gemm", (2, 0, 0), -np.inf, "gemm has 1 non-finite (NaN or inf) value(s), the first in record 2 ("),
        ("latency", (4,), np.nan, "latency has 1 NaN or non-positive value(s), the first in record 4 ("),
        ("task_tags", (1, 0), np.nan, "task_tags has 1 non-finite (NaN or inf) value(s), the first in task "),
    ],
)
def test_non_finite_shard_values_fail_validation_naming_file_and_field(tmp_path, field, index, value, message):
    write_synthetic_shards(tmp_path, num_shards=1, num_tasks=3, records_per_task=10)
    (path,) = tmp_path.glob("*.h5")
    read_shard(path)  # valid before the fault
    with h5py.File(path, "r+") as h5:  # the fault, written into the real file
        arr = h5[field][()]
        arr[index] = value
        h5[field][...] = arr
    with pytest.raises(ShardError) as err:
        read_shards(tmp_path)
    assert str(err.value).startswith(f"{path}: {message}")


# item 7: stale shards and a false manifest ------------------------------------------------------


def test_other_records_into_an_existing_out_are_refused_then_rebuilt_with_overwrite(tree, tmp_path):
    out = tmp_path / "shards"
    _cut(tree, 4)
    conv = tree / DEVICE / CONV
    featurize([tree, "--out", out, "--tasks-per-shard", 1])
    assert read_manifest(out)["num_tasks"] == 2
    before = {p.name: p.read_bytes() for p in out.glob("*.h5")}
    shutil.rmtree(conv)  # other records: the matmul task alone -> one planned shard
    result = _cli(tree, "--out", out, "--tasks-per-shard", 1)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert (
        "error: --out" in result.stderr and "1 shard file(s) this run would not write (shard-00001.h5)" in result.stderr
    )
    assert {p.name: p.read_bytes() for p in out.glob("*.h5")} == before  # refused: nothing touched

    featurize([tree, "--out", out, "--tasks-per-shard", 1, "--overwrite"])
    manifest = read_manifest(out)
    assert [s["file"] for s in manifest["shards"]] == ["shard-00000.h5"] and manifest["complete"]
    assert manifest["num_tasks"] == 1 and manifest["num_records"] == 4
    assert manifest["inputs"]["records"] == [str(tree.resolve())] and manifest["inputs"]["tasks_per_shard"] == 1
    assert read_shards(out).task_key.tolist() == [f"{DEVICE}/{MATMUL}"]


def test_other_tasks_per_shard_never_writes_a_false_manifest(tree, tmp_path, capsys):
    out = tmp_path / "shards"
    _cut(tree, 4)
    featurize([tree, "--out", out, "--tasks-per-shard", 1])
    with pytest.raises(SystemExit) as exit_info:  # 1 -> 2 tasks per shard: shard-00001 would be stale
        featurize([tree, "--out", out, "--tasks-per-shard", 2])
    assert exit_info.value.code == 2 and "another --tasks-per-shard" in capsys.readouterr().err
    assert read_manifest(out)["inputs"]["tasks_per_shard"] == 1

    featurize([tree, "--out", out, "--tasks-per-shard", 2, "--overwrite"])
    manifest = read_manifest(out)
    assert manifest["num_tasks"] == 2 and manifest["num_records"] == 4 + 24 and len(manifest["shards"]) == 1
    assert read_shards(out).num_records == manifest["num_records"]

    featurize([tree, "--out", out, "--tasks-per-shard", 1])  # 2 -> 1: the planned shard-00000 is rebuilt
    assert "1 rebuilt" in capsys.readouterr().err
    manifest = read_manifest(out)
    assert manifest["num_records"] == 4 + 24 and [len(s["tasks"]) for s in manifest["shards"]] == [1, 1]


def test_a_folder_with_a_shard_from_other_inputs_is_refused_by_the_reader(tree, tmp_path):
    """What an interrupted re-featurize leaves: one shard of the new plan, one of the old inputs."""
    _cut(tree, 4)
    old, new = tmp_path / "old", tmp_path / "new"
    featurize([tree, "--out", old, "--tasks-per-shard", 1, "--failed", "zero"])
    featurize([tree, "--out", new, "--tasks-per-shard", 1, "--failed", "drop"])
    shutil.copy(old / "shard-00001.h5", new / "shard-00001.h5")
    with pytest.raises(ShardError, match="shard-00001.h5: was made from other inputs than the run"):
        read_shards(new)


# item 11 (data side): bad arguments get error: lines, exit 2 -------------------------------------


@pytest.mark.parametrize(
    "args, message",
    [
        (["NOWHERE", "--out", "OUT"], "nowhere: not a folder of MetaSchedule records"),
        (["TREE", "--out", "OUT", "--workers", "two"], 'Parser key "workers"'),
        (["TREE", "--out", "OUT", "--tasks-per-shard", "0"], "--tasks-per-shard 0: must be >= 1"),
        (["TREE", "--out", "OUT", "--failed", "maybe"], "failed"),
        (["TREE", "--out", "FILE"], "exists and is not a folder"),
        (["TREE", "--out", "OUT", "--network", "a,b"], "--network 'a,b'"),
        (["TREE"], "--out"),
    ],
    ids=["missing-records", "workers-type", "tasks-per-shard", "failed-choice", "out-is-file", "network", "no-out"],
)
def test_bad_arguments_get_error_lines_not_tracebacks(tree, tmp_path, args, message):
    (tmp_path / "FILE").write_text("not a folder")
    names = {"TREE": tree, "OUT": tmp_path / "out", "FILE": tmp_path / "FILE", "NOWHERE": tmp_path / "nowhere"}
    result = _cli(*[names.get(a, a) for a in args])
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and "error:" in result.stderr and message in result.stderr


def test_config_file_and_print_config(tree, tmp_path):
    printed = _cli(tree, "--out", tmp_path / "out", "--tasks-per-shard", 3, "--print_config")
    assert printed.returncode == 0 and "tasks_per_shard: 3" in printed.stdout and "network: null" in printed.stdout
    config = tmp_path / "featurize.yaml"
    config.write_text(printed.stdout)
    again = _cli("--config", config, "--print_config")
    assert again.returncode == 0 and again.stdout == printed.stdout
    helped = _cli("--help")
    assert "default: 16" in helped.stdout and "--network NETWORK" in helped.stdout and "--overwrite" in helped.stdout


# kill -9 in the middle of a run, then resume -----------------------------------------------------


def test_kill_9_mid_run_then_resume_gives_the_same_shards(tree, tmp_path):
    out, clean = tmp_path / "killed", tmp_path / "clean"
    proc = subprocess.Popen(
        [sys.executable, "-m", "data.featurize", str(tree), "--out", str(out), "--tasks-per-shard", "1"],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "TVM_NUM_THREADS": "1"},
    )
    deadline = time.monotonic() + 300
    while not (out / "shard-00000.h5").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)  # the conv task is written first; the matmul one is in flight
    assert proc.wait() == -signal.SIGKILL
    written = sorted(p.name for p in out.glob("*.h5"))
    assert written == ["shard-00000.h5"], "the kill should land between the two shards"
    read_shard(out / "shard-00000.h5")  # what was written is whole
    featurize([tree, "--out", out, "--tasks-per-shard", 1])
    featurize([tree, "--out", clean, "--tasks-per-shard", 1])
    for name in ("shard-00000.h5", "shard-00001.h5"):
        assert (out / name).read_bytes() == (clean / name).read_bytes()
    manifest = read_manifest(out)
    assert manifest["complete"] and manifest["num_records"] == 48
    assert json.loads((out / "manifest.json").read_text())["missing"] == []
