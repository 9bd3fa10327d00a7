"""benchmarks/gpu/keep.py: a device call's suite results merged into the tree from real tars, twice,
without replacing what the tree has (arm CSVs, eager times, databases) and with the lane logs."""

import importlib.util
import json
import lzma
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("keep_device", REPO / "benchmarks" / "gpu" / "keep.py")
keep_module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(keep_module)

RES = "benchmarks/results/ablations/gate"


def _device_call(
    tmp: Path, eager: dict, csv: str, lane: str = "lane0", earlier_arm: bool = False, placeholder: bool = False
) -> Path:
    """A call folder as lanes.sh leaves it: laneI/ with both tars, and laneI.log; with `earlier_arm`, the
    work dir also holds an arm that an earlier call on the same warm machine ran (its CSV not in RES);
    with `placeholder`, RES holds that arm's CSV as the empty file `stage.sh out lean` leaves."""
    stage = tmp / f"stage_{lane}_{len(eager)}"
    (stage / RES / "dense_8x8x8").mkdir(parents=True)
    (stage / RES / "dense_8x8x8" / "moa-s0.csv").write_text(csv)
    if placeholder:
        (stage / RES / "conv_1x1").mkdir(parents=True)
        (stage / RES / "conv_1x1" / "pruner-s0.csv").write_text("")
    (stage / RES / "eager.json").write_text(json.dumps(eager))
    arm = stage / "runs" / lane / "dense_8x8x8" / "moa-s0"
    arm.mkdir(parents=True)
    (arm / "database_workload.json").write_text('["w"]\n')
    (arm / "database_tuning_record.json").write_text('[0, ["r"]]\n')
    (arm / "tuning_curve.png").write_bytes(b"png")  # not kept
    (arm / "reread").mkdir()  # the arm's re-read records (bridge.reread): kept as its .reread.json only
    (arm / "reread" / "database_tuning_record.json").write_text('[0, ["reread"]]\n')
    (stage / RES / "dense_8x8x8" / "moa-s0.reread.json").write_text('{"reread": {}}\n')
    if earlier_arm:
        old = stage / "runs" / lane / "conv_1x1" / "pruner-s0"
        old.mkdir(parents=True)
        (old / "database_workload.json").write_text('["c"]\n')
        (old / "database_tuning_record.json").write_text('[0, ["c"]]\n')
    call = tmp / f"call_{len(eager)}"
    (call / lane).mkdir(parents=True)
    with tarfile.open(call / lane / "tuning_results.tar.xz", "w:xz") as tar:
        tar.add(stage / "benchmarks", arcname="benchmarks")
    with tarfile.open(call / lane / "tuning_work.tar.xz", "w:xz") as tar:
        tar.add(stage / "runs", arcname="runs")
    (call / f"{lane}.log").write_text("arm dense moa seed 0: 16 trials\n")
    return call


def test_a_call_is_merged_once_and_keeps_what_the_tree_has(tmp_path):
    root = tmp_path / "tree"
    (root / RES).mkdir(parents=True)
    (root / RES / "eager.json").write_text(json.dumps({"matmul:8,8,8": 1.0}))
    first = _device_call(tmp_path, {"dense:8,8,8": 2.0}, "task,round\nd,1\n")
    report = keep_module.keep(first, label="call1", root=root)
    assert not report["conflicts"] and not report["skipped"]  # the arm's reread/ is neither kept nor an arm
    assert (root / RES / "dense_8x8x8" / "moa-s0.reread.json").read_text() == '{"reread": {}}\n'
    assert json.loads((root / RES / "eager.json").read_text()) == {"matmul:8,8,8": 1.0, "dense:8,8,8": 2.0}
    assert (root / RES / "dense_8x8x8" / "moa-s0.csv").read_text() == "task,round\nd,1\n"
    db = root / "benchmarks/results/suite_databases/ablations/gate/dense_8x8x8/moa-s0"
    assert sorted(p.name for p in db.iterdir()) == ["database_tuning_record.json.xz", "database_workload.json.xz"]
    assert lzma.decompress((db / "database_tuning_record.json.xz").read_bytes()) == b'[0, ["r"]]\n'
    assert (root / "benchmarks/results/ablations/logs/call1.log").read_text().startswith("arm dense")

    # the same call again adds nothing; an older call whose eager time and CSV differ changes nothing
    assert keep_module.keep(first, label="call1", root=root)["added"] == []
    older = _device_call(tmp_path, {"dense:8,8,8": 9.0, "conv:1": 3.0}, "task,round\nd,OLD\n")
    report = keep_module.keep(older, root=root)
    assert json.loads((root / RES / "eager.json").read_text())["dense:8,8,8"] == 2.0  # the tree's time stays
    assert json.loads((root / RES / "eager.json").read_text())["conv:1"] == 3.0  # a new one is added
    assert (root / RES / "dense_8x8x8" / "moa-s0.csv").read_text().endswith("d,1\n")
    assert report["conflicts"] == [f"{RES}/dense_8x8x8/moa-s0.csv: differs from the tree's; the tree's kept"]


def test_the_cli_names_a_folder_without_results(tmp_path):
    done = subprocess.run(
        [sys.executable, "benchmarks/gpu/keep.py", str(tmp_path), "--root", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode != 0 and "no tuning results in this call's folder" in done.stderr
    assert keep_module._database_home(Path("benchmarks/results/tuning_240")) == Path(
        "benchmarks/results/suite_databases"
    )


def test_another_gpus_results_keep_their_databases_apart():
    home = keep_module._database_home
    assert home(Path("benchmarks/results/tuning")) == Path("benchmarks/results/suite_databases")
    assert home(Path("benchmarks/results/tuning_240_h200")) == Path("benchmarks/results/suite_databases/h200")
    assert home(Path("benchmarks/results/ablations/gate")) == Path("benchmarks/results/suite_databases/ablations/gate")
    with pytest.raises(ValueError, match="not benchmarks/results/tuning"):
        home(Path("benchmarks/results/quality"))


def test_an_earlier_calls_arm_left_in_a_warm_machines_work_dir_is_not_kept(tmp_path):
    root = tmp_path / "tree"
    call = _device_call(tmp_path, {"dense:8,8,8": 2.0}, "task,round\nd,1\n", earlier_arm=True)
    report = keep_module.keep(call, root=root)
    home = root / "benchmarks/results/suite_databases/ablations/gate"
    assert (home / "dense_8x8x8" / "moa-s0" / "database_tuning_record.json.xz").exists()
    assert not (home / "conv_1x1").exists()
    assert report["skipped"] == ["conv_1x1/pruner-s0: no arm of the call's results"]


def test_a_placeholder_csv_from_stage_sh_is_not_a_result(tmp_path):
    """The tree has the arm; the device had its empty placeholder and, on a warm machine, its database."""
    root = tmp_path / "tree"
    (root / RES / "conv_1x1").mkdir(parents=True)
    (root / RES / "conv_1x1" / "pruner-s0.csv").write_text("task,round\nc,1\n")
    call = _device_call(tmp_path, {"dense:8,8,8": 2.0}, "task,round\nd,1\n", earlier_arm=True, placeholder=True)
    report = keep_module.keep(call, root=root)
    assert not report["conflicts"], report
    assert (root / RES / "conv_1x1" / "pruner-s0.csv").read_text() == "task,round\nc,1\n"
    assert f"{RES}/dense_8x8x8/moa-s0.csv" in report["added"]
    assert report["skipped"] == ["conv_1x1/pruner-s0: no arm of the call's results"]
    # a tree without the arm gets no empty file from the placeholder either
    bare = tmp_path / "bare"
    keep_module.keep(call, root=bare)
    assert not (bare / RES / "conv_1x1" / "pruner-s0.csv").exists()


def test_lanes_bundled_one_tar_each_are_kept_with_their_logs(tmp_path):
    """lanes.sh with three lanes or more: laneI.tar holds laneI/ (both tars) and laneI/lane.log."""
    root = tmp_path / "tree"
    calls = [
        _device_call(tmp_path / f"c{i}", {"dense:8,8,8": 2.0}, "task,round\nd,1\n", lane=f"lane{i}") for i in range(2)
    ]
    bundled = tmp_path / "bundled"
    bundled.mkdir()
    for i, call in enumerate(calls):
        (call / f"lane{i}.log").rename(call / f"lane{i}" / "lane.log")
        with tarfile.open(bundled / f"lane{i}.tar", "w") as tar:
            tar.add(call / f"lane{i}", arcname=f"lane{i}")
    report = keep_module.keep(bundled, label="four", root=root)
    assert not report["conflicts"], report
    assert (root / RES / "dense_8x8x8" / "moa-s0.csv").read_text() == "task,round\nd,1\n"
    logs = root / "benchmarks/results/ablations/logs"
    assert sorted(p.name for p in logs.iterdir()) == ["four_lane0.log", "four_lane1.log"]
    assert (logs / "four_lane1.log").read_text().startswith("arm dense")
    assert (root / "benchmarks/results/suite_databases/ablations/gate/dense_8x8x8/moa-s0").is_dir()


def test_a_lane_with_a_results_folder_nested_in_itself_is_refused_before_anything_is_added(tmp_path):
    """A stale stage.sh staging once put RES/<name>/ inside RES on the device: whose databases the work dir
    holds is then unknown. The call is refused, naming the tar, and no lane adds anything (before, the lanes
    before the refused one had been merged)."""
    root = tmp_path / "tree"
    root.mkdir()
    call = _device_call(tmp_path / "a", {"dense:8,8,8": 2.0}, "task,round\nd,1\n", lane="lane0")
    other = _device_call(tmp_path / "b", {"dense:8,8,8": 2.0}, "task,round\nd,2\n", lane="lane1")
    nested = tmp_path / "nested"
    with tarfile.open(other / "lane1" / "tuning_results.tar.xz") as tar:
        tar.extractall(nested, filter="data")
    (nested / RES / "gate" / "dense_8x8x8").mkdir(parents=True)
    (nested / RES / "gate" / "dense_8x8x8" / "moa-s0.csv").write_text("task,round\nd,OLD\n")
    with tarfile.open(other / "lane1" / "tuning_results.tar.xz", "w:xz") as tar:
        tar.add(nested / "benchmarks", arcname="benchmarks")
    (other / "lane1").rename(call / "lane1")
    (other / "lane1.log").rename(call / "lane1.log")
    with pytest.raises(ValueError, match=r"lane1/tuning_results.tar.xz: several results folders .*gate/gate"):
        keep_module.keep(call, label="nested", root=root)
    assert list(root.iterdir()) == []  # lane0, which alone was fine, added nothing either
