"""Fault injection on record input (issue 11, items 2, 4, 8, 9): real files with the fault written in,
read by data.records and featurized by data.featurize; every case is counted and named, none is lost
or counted twice."""

import json
import lzma
import shutil
from pathlib import Path

import numpy as np
import pytest

from data.datamodule import ShardDataModule
from data.featurize import main as featurize
from data.records import read_records
from data.shards import read_shards

FIXTURE = Path(__file__).parents[1] / "fixtures" / "tiny_records"
DEVICE = "llvm-sapphirerapids-2c"
MATMUL = "matmul_e87e4aed"
CONV = "conv2d_nhwc_e7d8f54e"
PER_TASK = 6


@pytest.fixture
def tree(tmp_path):
    """The fixture tree with PER_TASK records per task (the conv task stays xz-compressed)."""
    root = tmp_path / "tree"
    shutil.copytree(FIXTURE, root)
    plain = root / DEVICE / MATMUL / "database_tuning_record.json"
    plain.write_text("".join(plain.read_text().splitlines(keepends=True)[:PER_TASK]))
    packed = root / DEVICE / CONV / "database_tuning_record.json.xz"
    lines = lzma.decompress(packed.read_bytes()).decode().splitlines(keepends=True)[:PER_TASK]
    packed.write_bytes(lzma.compress("".join(lines).encode()))
    return root


def _records(root: Path) -> Path:
    return root / DEVICE / MATMUL / "database_tuning_record.json"


# item 2: duplicates --------------------------------------------------------------------------


def test_same_tree_twice_is_read_once_and_the_copies_counted(tree):
    result = read_records([tree, tree / DEVICE])
    s = result.summary
    assert s.lines == 4 * PER_TASK and s.kept == 2 * PER_TASK
    assert s.counts["duplicate record"] == 2 * PER_TASK
    assert [len(t.records) for t in result.tasks.values()] == [PER_TASK, PER_TASK]
    conv = tree / DEVICE / CONV / "database_tuning_record.json.xz"  # read first (tasks sorted by folder)
    assert s.examples["duplicate record"][0] == f"{conv}:1: same task, workload and trace as {conv}:1; kept once"


def test_repeated_line_is_kept_once(tree):
    path = _records(tree)
    lines = path.read_text().splitlines()
    path.write_text("\n".join([*lines, lines[2], lines[2]]) + "\n")
    s = read_records([tree]).summary
    assert s.counts["duplicate record"] == 2 and s.kept == 2 * PER_TASK
    assert (
        s.examples["duplicate record"][0]
        == f"{path}:{PER_TASK + 1}: same task, workload and trace as {path}:3; kept once"
    )


def test_no_duplicate_reaches_both_train_and_test(tree, tmp_path):
    """The reported leak: a tree given as ROOT and ROOT/<device>, then a within-task split."""
    out = tmp_path / "shards"
    summary = featurize([tree, tree / DEVICE, "--out", out])
    assert summary.counts["duplicate record"] == 2 * PER_TASK
    data = read_shards(out)
    assert data.num_records == 2 * PER_TASK and len(set(data.record_source.tolist())) == data.num_records
    dm = ShardDataModule(str(out), test_fraction=0.5, val_fraction=0.0, drop_failed=False)
    dm.setup("fit")
    train = set(data.record_source[dm.splits["train"]].tolist())
    test = set(data.record_source[dm.splits["test"]].tolist())
    assert train and test and not train & test


# item 4: a byte that is not UTF-8 --------------------------------------------------------------


@pytest.mark.parametrize("compressed", [False, True], ids=["plain", "xz"])
def test_non_utf8_byte_costs_its_line_only(tree, compressed):
    path = _records(tree)
    lines = path.read_bytes().splitlines(keepends=True)
    lines[2] = lines[2][:40] + b"\xff\xfe" + lines[2][40:]  # line 3 of 6
    data = b"".join(lines)
    if compressed:
        path.unlink()
        path = path.with_name(path.name + ".xz")
        path.write_bytes(lzma.compress(data))
    else:
        path.write_bytes(data)
    result = read_records([tree])
    s = result.summary
    assert s.counts["malformed line"] == 1 and s.examples["malformed line"] == [f"{path}:3: not UTF-8 text (byte 0xff)"]
    kept = result.tasks[f"{DEVICE}/{MATMUL}"].records
    assert [r.source for r in kept] == [f"{path}:{n}" for n in (1, 2, 4, 5, 6)]  # the lines after it are kept


def test_non_utf8_workload_line_names_that_line(tree):
    wl = tree / DEVICE / MATMUL / "database_workload.json"
    wl.write_bytes(wl.read_bytes() + b'["1", "\xff"]\n')
    path = _records(tree)
    body = json.loads(path.read_text().splitlines()[0])[1]
    path.write_text(path.read_text() + json.dumps([1, body]) + "\n")
    s = read_records([tree]).summary
    assert s.examples["malformed line"] == [f"{wl}:2: not UTF-8 text (byte 0xff)"]
    assert s.examples["unknown workload"] == [f"{path}:{PER_TASK + 1}: workload line {wl}:2 is not UTF-8 text"]
    assert s.kept == 2 * PER_TASK


# item 8: an unusable index.json --------------------------------------------------------------


@pytest.mark.parametrize(
    "content, why",
    [
        (b'{"tasks": {"x": \xff}}', "not UTF-8 text"),
        (b"[1, 2, 3]", "top level is a list"),
        (b'{"tasks": ["matmul"]}', "'tasks' is not an object"),
        (b'{"networks": {"resnet": [["a", "b", "c"]]}}', "networks['resnet'] is not a list of [task_dir, weight]"),
        (b'{"tasks": {"m": {"flops": "many"}}}', "tasks['m'].flops is 'many'"),
        (b'{"target": "llvm", "tasks"', "not valid JSON"),
    ],
    ids=["non-utf8", "list", "tasks-list", "network-rows", "flops-string", "torn"],
)
def test_bad_index_is_an_unreadable_file_not_an_abort(tree, tmp_path, capsys, content, why):
    index = tree / DEVICE / "index.json"
    index.write_bytes(content)
    summary = featurize([tree, "--out", tmp_path / "shards"])
    assert summary.counts["unreadable file"] == 1
    (example,) = summary.examples["unreadable file"]
    assert example.startswith(f"{index}: {index}: ") and why in example
    assert "unreadable file: 1" in capsys.readouterr().out
    data = read_shards(tmp_path / "shards")  # the records are still featurized, names from the folders
    assert data.num_records == 2 * PER_TASK and sorted(data.task_name.tolist()) == ["conv2d_nhwc", "matmul"]


# item 9: an implausible latency -----------------------------------------------------------------


@pytest.mark.parametrize("secs", [[1e-45], [0.0], [-1.0], [float("nan")], [2e-3, 1e-30]])
def test_implausible_latency_is_flagged_and_left_out_of_the_labels(tree, tmp_path, secs):
    path = _records(tree)
    lines = path.read_text().splitlines()
    wl, body = json.loads(lines[3])
    body[1] = secs
    lines[3] = json.dumps([wl, body])  # json writes NaN as NaN, as Python's json.loads reads it
    path.write_text("\n".join(lines) + "\n")
    summary = featurize([tree, "--out", tmp_path / "shards"])
    assert summary.counts["implausible latency"] == 1
    assert summary.examples["implausible latency"][0].startswith(f"{path}:4: run_secs value ")
    data = read_shards(tmp_path / "shards")
    mm = data.task_key == f"{DEVICE}/{MATMUL}"
    rec = mm[data.record_task]
    assert rec.sum() == PER_TASK - 1 and f"{path}:4" not in data.record_source.tolist()
    assert data.latency[rec].min() > 1e-7  # the best is a real measurement
    labels = data.label[rec]
    assert labels.max() == 1 and np.median(labels) > 0.05  # the other labels did not collapse to ~0
