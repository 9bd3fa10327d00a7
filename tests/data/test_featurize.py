"""The featurizer CLI end to end on real measured records: shards, labels, bad records, resume,
partitioning across processes and determinism."""

import base64
import json
import lzma
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from data.featurize import main as featurize_main
from data.shards import read_manifest, read_shard_attrs, read_shards

FIXTURE = Path(__file__).parents[1] / "fixtures" / "tiny_records"
DEVICE = "llvm-sapphirerapids-2c"
MATMUL = "matmul_e87e4aed"
CONV = "conv2d_nhwc_e7d8f54e"
PER_TASK = 5


@pytest.fixture
def tree(tmp_path):
    """The fixture tree cut to PER_TASK records per task (the conv task stays xz-compressed)."""
    root = tmp_path / "tree"
    shutil.copytree(FIXTURE, root)
    plain = root / DEVICE / MATMUL / "database_tuning_record.json"
    plain.write_text("".join(plain.read_text().splitlines(keepends=True)[:PER_TASK]))
    packed = root / DEVICE / CONV / "database_tuning_record.json.xz"
    lines = lzma.decompress(packed.read_bytes()).decode().splitlines(keepends=True)[:PER_TASK]
    packed.write_bytes(lzma.compress("".join(lines).encode()))
    return root


def run(*args):
    return featurize_main([str(a) for a in args])


def test_end_to_end_shards(tree, tmp_path, capsys):
    out = tmp_path / "shards"
    summary = run(tree, "--out", out, "--tasks-per-shard", 1)
    assert summary.kept == 2 * PER_TASK and summary.skipped() == 0
    assert "records: 10 lines in 2 files, 10 kept, 0 skipped" in capsys.readouterr().out
    data = read_shards(out)
    data.validate()
    assert data.task_key.tolist() == [f"{DEVICE}/{CONV}", f"{DEVICE}/{MATMUL}"]
    assert data.task_name.tolist() == ["conv2d_nhwc", "matmul"] and data.task_networks.tolist() == ["", ""]
    np.testing.assert_array_equal(data.task_flops, [294912, 2 * 64**3])
    assert data.task_tags[0, 3] == 1 and data.task_tags[1, 6] == 1  # conv2d, dense
    assert json.loads(data.task_target[0])["mcpu"] == "sapphirerapids"
    for t in range(2):
        labels = data.label[data.record_task == t]
        assert labels.max() == 1 and (labels > 0).all() and (labels <= 1).all()
    lat = data.latency[data.record_task == 1]
    np.testing.assert_allclose(data.label[data.record_task == 1], lat.min() / lat, rtol=1e-6)
    assert (np.diff(data.stmt_ptr) >= 1).all() and (np.diff(data.psa_ptr) >= 1).all()
    assert (np.diff(data.access_ptr) >= 3).all() and not data.gemm_found.any()
    assert data.record_source[0] == f"{tree / DEVICE / CONV / 'database_tuning_record.json.xz'}:1"
    manifest = read_manifest(out)
    assert manifest["num_records"] == 10 and [s["file"] for s in manifest["shards"]] == [
        "shard-00000.h5",
        "shard-00001.h5",
    ]
    attrs = read_shard_attrs(out / "shard-00001.h5")
    assert attrs["tasks"] == [f"{DEVICE}/{MATMUL}"] and attrs["featurizer"]["failed"] == "zero" and attrs["tvm_version"]


def test_bad_records_are_counted_and_printed(tree, tmp_path, capsys):
    path = tree / DEVICE / MATMUL / "database_tuning_record.json"
    lines = path.read_text().splitlines()
    wl_index, (trace, run_secs, *rest) = json.loads(lines[0])
    # the failed measurement is of a schedule not yet in the file (the same trace again is a duplicate)
    full = (FIXTURE / DEVICE / MATMUL / "database_tuning_record.json").read_text().splitlines()
    other_trace = json.loads(full[PER_TASK])[1][0]
    insts, decisions = trace
    # a trace recorded on another workload: its first block does not exist here
    renamed = [
        [k, ins, ["no_such_block", *attrs[1:]] if k == "GetSBlock" else attrs, outs] for k, ins, attrs, outs in insts
    ]
    lines += [
        json.dumps([wl_index, [[renamed, decisions], run_secs, *rest]]),
        json.dumps([wl_index, [other_trace, [1e10], *rest]]),
        "garbage",
    ]
    # a second workload line that is valid base64 but no module, and a record using it
    wl_path = path.parent / "database_workload.json"
    wl_path.write_text(wl_path.read_text() + json.dumps(["1", base64.b64encode(b'{"nodes": []}').decode()]) + "\n")
    lines.append(json.dumps([1, [trace, run_secs, *rest]]))
    path.write_text("\n".join(lines) + "\n")
    out = tmp_path / "shards"
    summary = run(tree, "--out", out, "--failed", "zero")
    printed = capsys.readouterr().out
    assert summary.counts["unknown workload"] == 1
    assert summary.examples["unknown workload"][0].startswith(
        f"{path}:{PER_TASK + 4}: workload {wl_path}:2 does not decode"
    )
    assert summary.counts["trace no longer applies"] == 1
    assert summary.examples["trace no longer applies"][0].startswith(f"{path}:{PER_TASK + 1}: ScheduleError")
    assert "no_such_block" in summary.examples["trace no longer applies"][0]
    assert summary.counts["malformed line"] == 1 and f"{path}:{PER_TASK + 3}" in printed
    assert "trace no longer applies: 1" in printed and "failed measurement (kept, label 0): 1" in printed
    data = read_shards(out)
    mm = data.record_task == 1
    assert mm.sum() == PER_TASK + 1  # the failed measurement is kept with label 0
    assert np.isinf(data.latency[mm][-1]) and data.label[mm][-1] == 0

    dropped = tmp_path / "dropped"
    summary = run(tree, "--out", dropped, "--failed", "drop")
    assert summary.counts["failed measurement"] == 1 and (read_shards(dropped).record_task == 1).sum() == PER_TASK


def test_partitioned_processes_resume_and_determinism(tree, tmp_path, capsys):
    single = tmp_path / "single"
    run(tree, "--out", single, "--tasks-per-shard", 1)
    # two independent processes with disjoint shares fill one folder
    shared = tmp_path / "shared"
    run(tree, "--out", shared, "--tasks-per-shard", 1, "--shard-index", 1, "--num-shards", 2)
    assert sorted(p.name for p in shared.glob("*.h5")) == ["shard-00001.h5"]
    assert read_manifest(shared)["num_records"] == PER_TASK
    capsys.readouterr()
    run(tree, "--out", shared, "--tasks-per-shard", 1, "--shard-index", 0, "--num-shards", 2)
    assert "1 shards for this process (0 already done)" in capsys.readouterr().err
    assert read_manifest(shared)["num_records"] == 2 * PER_TASK
    for name in ("shard-00000.h5", "shard-00001.h5"):
        assert (single / name).read_bytes() == (shared / name).read_bytes()

    # resume: an interrupted run left a truncated shard; the finished one is not redone
    done = shared / "shard-00001.h5"
    stamp = done.stat().st_mtime_ns
    broken = shared / "shard-00000.h5"
    broken.write_bytes(broken.read_bytes()[:1000])
    run(tree, "--out", shared, "--tasks-per-shard", 1)
    assert "2 shards for this process (1 already done)" in capsys.readouterr().err
    assert done.stat().st_mtime_ns == stamp
    assert broken.read_bytes() == (single / "shard-00000.h5").read_bytes()

    # other options are other inputs: the shards are redone
    run(tree, "--out", shared, "--tasks-per-shard", 1, "--failed", "drop")
    assert "(0 already done)" in capsys.readouterr().err

    # two worker processes write the same bytes as one
    parallel = tmp_path / "parallel"
    run(tree, "--out", parallel, "--tasks-per-shard", 1, "--workers", 2)
    for name in ("shard-00000.h5", "shard-00001.h5"):
        assert (single / name).read_bytes() == (parallel / name).read_bytes()
    assert not [p for p in parallel.iterdir() if p.name.startswith(".")]


def test_option_errors(tree, tmp_path, capsys):
    for args, message in (
        (("--shard-index", 2, "--num-shards", 2), "--shard-index 2 --num-shards 2"),
        (("--workers", 0), "--workers 0"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            run(tree, "--out", tmp_path / "x", *args)
        assert exit_info.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "x").exists() or not os.listdir(tmp_path / "x")


def test_unusable_target_skips_the_task_and_writes_valid_empty_shards(tree, tmp_path):
    index_path = tree / DEVICE / "index.json"
    index = json.loads(index_path.read_text())
    index["target"] = {"kind": "no_such_target"}
    index_path.write_text(json.dumps(index))
    summary = run(tree, "--out", tmp_path / "out")
    assert summary.counts["unusable target"] == 2 * PER_TASK
    assert "no_such_target" in summary.examples["unusable target"][0]
    assert read_shards(tmp_path / "out").num_records == 0 and read_manifest(tmp_path / "out")["invalid"] == []


def test_one_workload_under_two_task_folders_is_warned_about(tree, tmp_path, capsys):
    """A workload read under two folder names (here a tuning work dir's copy beside the tree) becomes
    two tasks; featurize says which, since a hold-out split could put them on both sides."""
    copy = tmp_path / "work" / "pruner-s0"
    shutil.copytree(tree / DEVICE / MATMUL, copy)
    run(tree, "--out", tmp_path / "alone")
    assert "hold one workload" not in capsys.readouterr().err
    run(tree, copy, "--out", tmp_path / "both")
    err = capsys.readouterr().err
    (line,) = [x for x in err.splitlines() if "hold one workload" in x]
    assert f"{DEVICE}/{MATMUL}" in line and f"/{copy.name}_" in line and CONV not in line
    assert len(read_shards(tmp_path / "both").task_key) == 3
