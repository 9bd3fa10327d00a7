"""benchmarks/gpu/lanes.sh: one suite.sh per GPU, each with its lane's settings, GPU, cores and folders.

No GPU here: `nvidia-smi` is a stand-in that lists two GPUs, and `suite.sh` a stand-in that writes
the environment and CPU affinity it was started with; the script under test is the real one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SUITE_STANDIN = """#!/usr/bin/env bash
{ for v in CUDA_VISIBLE_DEVICES GPUS TVM_NUM_THREADS OUT WORK LIMIT RES ARMS REDRAFT_STALL PIPELINE VARIANTS; do
    echo "$v=${!v-}"; done
  grep Cpus_allowed_list /proc/self/status; echo "--"; } >> "$OUT/env.txt"
sleep 1
echo "lane done"
"""


def _project(tmp_path: Path, gpus: int = 2) -> Path:
    root = tmp_path / "project"
    (root / "benchmarks" / "gpu").mkdir(parents=True)
    shutil.copy(ROOT / "benchmarks" / "gpu" / "lanes.sh", root / "benchmarks" / "gpu" / "lanes.sh")
    (root / "benchmarks" / "gpu" / "suite.sh").write_text(SUITE_STANDIN)
    (root / ".devkit").mkdir()
    (root / ".devkit" / "use-devkit.sh").write_text("true\n")
    # pylib.sh stand-in: records that it was sourced and the lane count then started (none: before the lanes)
    (root / "benchmarks" / "gpu" / "pylib.sh").write_text(
        'echo "pylib $(ls -d "$OUT"/lane* 2>/dev/null | wc -l)" >> pylib.txt\n'
    )
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\n" + "".join(f"echo 'GPU {i}: NVIDIA H100'\n" for i in range(gpus)))
    smi.chmod(0o755)
    return root


def _run(root: Path, tmp_path: Path, *lanes: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}", OUT=str(tmp_path / "out"))
    (tmp_path / "out").mkdir(exist_ok=True)
    cmd = ["bash", "benchmarks/gpu/lanes.sh", *lanes]
    return subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=60)


def _jobs(out: Path, lane: int) -> list[dict[str, str]]:
    """The environment of each suite.sh the lane ran, in order."""
    blocks = (out / f"lane{lane}" / "env.txt").read_text().split("--\n")
    return [
        dict(line.split("=", 1) if "=" in line else line.split(":\t") for line in block.splitlines())
        for block in blocks
        if block.strip()
    ]


def _cores(allowed: str) -> set[int]:
    cores = set()
    for part in allowed.split(","):
        lo, _, hi = part.partition("-")
        cores.update(range(int(lo), int(hi or lo) + 1))
    return cores


@pytest.mark.skipif(
    shutil.which("taskset") is None or len(os.sched_getaffinity(0)) < 2, reason="needs taskset, 2 cores"
)
def test_each_lane_gets_its_gpu_cores_folders_and_settings(tmp_path):
    root = _project(tmp_path)
    done = _run(
        root,
        tmp_path,
        "RES=r/stall3 ARMS='pruner moa' REDRAFT_STALL=3",
        "RES=r/nopipe ARMS=pruner PIPELINE=false",
    )
    assert done.returncode == 0, done.stderr
    lanes = [_jobs(tmp_path / "out", i)[0] for i in range(2)]
    assert [lane["CUDA_VISIBLE_DEVICES"] for lane in lanes] == ["0", "1"]
    assert [lane["OUT"] for lane in lanes] == [str(tmp_path / "out" / f"lane{i}") for i in range(2)]
    assert [lane["WORK"] for lane in lanes] == ["runs/lane0", "runs/lane1"]
    assert (lanes[0]["RES"], lanes[0]["ARMS"], lanes[0]["REDRAFT_STALL"], lanes[0]["PIPELINE"]) == (
        "r/stall3",
        "pruner moa",
        "3",
        "",
    )
    assert (lanes[1]["RES"], lanes[1]["ARMS"], lanes[1]["REDRAFT_STALL"], lanes[1]["PIPELINE"]) == (
        "r/nopipe",
        "pruner",
        "",
        "false",
    )
    cores = [_cores(lane["Cpus_allowed_list"]) for lane in lanes]
    assert cores[0] and cores[1] and not cores[0] & cores[1]
    assert all(lane["GPUS"] == "1" and int(lane["TVM_NUM_THREADS"]) == len(c) for lane, c in zip(lanes, cores))
    assert all(0 < int(lane["LIMIT"]) <= 585 for lane in lanes)
    assert done.stdout.count("lane done") == 2 and "total" in done.stdout


@pytest.mark.skipif(
    shutil.which("taskset") is None or len(os.sched_getaffinity(0)) < 2, reason="needs taskset, 2 cores"
)
def test_pylib_is_sourced_before_any_lane_starts(tmp_path):
    root = _project(tmp_path)
    done = _run(root, tmp_path, "RES=r/a ARMS=pruner", "RES=r/b ARMS=xgb")
    assert done.returncode == 0, done.stderr
    assert (root / "pylib.txt").read_text() == "pylib 0\n"


def test_more_lanes_than_gpus_is_refused(tmp_path):
    root = _project(tmp_path)
    done = _run(root, tmp_path, "ARMS=xgb", "ARMS=pruner", "ARMS=moa")
    assert done.returncode == 2 and "3 lanes for 2 GPUs" in done.stderr
    assert not list((tmp_path / "out").glob("lane*"))


def test_a_lane_runs_its_jobs_in_order_each_with_its_own_settings(tmp_path):
    root = _project(tmp_path)
    done = _run(
        root,
        tmp_path,
        "RES=r/a ARMS=xgb REDRAFT_STALL=3 ;; RES=r/a ARMS=pruner PIPELINE=false",
        "RES=r/b ARMS=moa",
    )
    assert done.returncode == 0, done.stderr
    first, second = _jobs(tmp_path / "out", 0)
    assert (first["ARMS"], first["REDRAFT_STALL"], first["PIPELINE"]) == ("xgb", "3", "")
    assert (second["ARMS"], second["REDRAFT_STALL"], second["PIPELINE"]) == ("pruner", "", "false")
    assert first["CUDA_VISIBLE_DEVICES"] == second["CUDA_VISIBLE_DEVICES"] == "0"
    assert first["OUT"] == second["OUT"] == str(tmp_path / "out" / "lane0")
    assert int(second["LIMIT"]) < int(first["LIMIT"]) <= 585  # the second job gets what the first left
    (only,) = _jobs(tmp_path / "out", 1)
    assert only["ARMS"] == "moa" and only["CUDA_VISIBLE_DEVICES"] == "1"
    log = (tmp_path / "out" / "lane0.log").read_text()
    assert log.count("lane done") == 2 and log.index("ARMS=xgb") < log.index("ARMS=pruner")


def test_a_lane_whose_jobs_use_two_results_folders_is_refused_before_any_lane_starts(tmp_path):
    root = _project(tmp_path)
    done = _run(root, tmp_path, "RES=r/a ARMS=xgb", "RES=r/a ARMS=xgb ;; RES=r/b ARMS=pruner")
    assert done.returncode == 2 and "lane 1's jobs use two results folders (r/a, r/b)" in done.stderr
    assert not list((tmp_path / "out").glob("lane*"))


def test_four_lanes_come_back_as_one_tar_each(tmp_path):
    """Two tars and a log a lane would be 12 files, over the 8 a device call brings back. (`nproc` and
    `taskset` are stand-ins too: this machine may have fewer cores than four lanes need.)"""
    root = _project(tmp_path, gpus=4)
    for name, body in (("nproc", "echo 64"), ("taskset", 'shift 2; exec "$@"')):
        (tmp_path / "bin" / name).write_text(f"#!/bin/bash\n{body}\n")
        (tmp_path / "bin" / name).chmod(0o755)
    done = _run(root, tmp_path, "RES=r/ab ARMS=xgb", "RES=r/ab ARMS=pruner", "RES=r/ab ARMS=pruner LABEL=pruner-r16",
                "RES=r/ab ARMS=xgb SEEDS=1")  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == [f"lane{i}.tar" for i in range(4)]
    for i in range(4):
        with tarfile.open(out / f"lane{i}.tar") as tar:
            names = set(tar.getnames())
        assert {f"lane{i}/env.txt", f"lane{i}/lane.log"} <= names, names
    with tarfile.open(out / "lane2.tar") as tar:
        assert b"lane done" in tar.extractfile("lane2/lane.log").read()
        assert b"ARMS=pruner\n" in tar.extractfile("lane2/env.txt").read()
    assert done.stdout.count("lane done") == 4


def test_two_lanes_writing_one_arm_are_refused_before_any_lane_starts(tmp_path):
    """The same arm on two lanes once ran twice, and the later run overwrote the other's CSV."""
    root = _project(tmp_path)
    done = _run(
        root,
        tmp_path,
        "RES=r/a ARMS=moa WORKLOADS='dense:8,8,8 bmm:1,2,3,4' SEEDS='0 1'",
        "RES=r/a ARMS=moa WORKLOADS='vit dense:8,8,8' SEEDS=1",
    )
    assert done.returncode == 2 and "lanes 0 and 1 both run arm moa seed 1 of dense:8,8,8 in r/a" in done.stderr
    assert not list((tmp_path / "out").glob("lane*"))
    # a job naming no workloads runs the default ones, which may hold any named workload
    done = _run(root, tmp_path, "RES=r/a ARMS=xgb", "RES=r/a ARMS='xgb pruner' WORKLOADS=dense:8,8,8")
    assert done.returncode == 2 and "both run arm xgb seed 0 of" in done.stderr
    # a job's VARIANTS name its arms: a variant's label, or the method's own for its default arm
    quick = "VARIANTS='pruner-quick:quick_start=true,draft_rounds=2 pruner'"
    done = _run(
        root, tmp_path, f"RES=r/a ARMS=pruner {quick} WORKLOADS=dense:8,8,8", "RES=r/a ARMS=pruner LABEL=pruner-quick"
    )
    assert done.returncode == 2 and "lanes 0 and 1 both run arm pruner-quick seed 0 of" in done.stderr
    done = _run(
        root,
        tmp_path,
        f"RES=r/a ARMS=pruner {quick} WORKLOADS=dense:8,8,8",
        "RES=r/a ARMS=pruner WORKLOADS=dense:8,8,8",
    )
    assert done.returncode == 2 and "both run arm pruner seed 0 of dense:8,8,8 in r/a" in done.stderr
    done = _run(
        root, tmp_path, f"RES=r/a ARMS=pruner {quick} WORKLOADS=dense:8,8,8", "RES=r/a ARMS=pruner LABEL=pruner-r16"
    )
    assert done.returncode == 0, done.stderr
    assert _jobs(tmp_path / "out", 0)[-1]["VARIANTS"] == "pruner-quick:quick_start=true,draft_rounds=2 pruner"


def test_lanes_that_differ_in_seed_label_or_folder_run(tmp_path):
    root = _project(tmp_path)
    done = _run(
        root,
        tmp_path,
        "RES=r/a ARMS=pruner WORKLOADS=dense:8,8,8 ;; RES=r/a ARMS=pruner LABEL=pruner-r16 WORKLOADS=dense:8,8,8",
        "RES=r/a ARMS=pruner SEEDS=1 WORKLOADS=dense:8,8,8 ;; RES=r/a ARMS=pruner WORKLOADS=dense:8,8,8 SEEDS=2",
    )
    assert done.returncode == 0, done.stderr
    done = _run(root, tmp_path, "RES=r/a ARMS=xgb", "RES=r/b ARMS=xgb")
    assert done.returncode == 0, done.stderr


def test_a_job_with_too_little_time_left_for_an_arm_is_not_started(tmp_path):
    root = _project(tmp_path)
    env = dict(os.environ, PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}", OUT=str(tmp_path / "out"), LIMIT="100")
    (tmp_path / "out").mkdir()
    cmd = [
        "bash",
        "benchmarks/gpu/lanes.sh",
        "RES=r/a ARMS=xgb BUDGET=5 ;; RES=r/a ARMS=pruner BUDGET=60",
        "RES=r/b ARMS=moa",
    ]
    done = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    (started,) = _jobs(tmp_path / "out", 0)  # BUDGET 5 needs 95 s of the 100; BUDGET 60 needs 150
    assert started["ARMS"] == "xgb"
    log = (tmp_path / "out" / "lane0.log").read_text()
    assert "== job not started: RES=r/a ARMS=pruner BUDGET=60" in log and "needs about 150" in log
    assert not (tmp_path / "out" / "lane1" / "env.txt").exists()  # the default BUDGET, 120, needs 210


def test_a_lane_that_finished_is_bundled_while_another_still_runs(tmp_path):
    """A call once outran its limit while two of four lanes were done: their files were lost, since
    the tars were made only after every lane ended."""
    root = _project(tmp_path, gpus=4)
    for name, body in (("nproc", "echo 64"), ("taskset", 'shift 2; exec "$@"')):
        (tmp_path / "bin" / name).write_text(f"#!/bin/bash\n{body}\n")
        (tmp_path / "bin" / name).chmod(0o755)
    slow = SUITE_STANDIN.replace("sleep 1", '[ "$CUDA_VISIBLE_DEVICES" = 3 ] && sleep 30; sleep 1')
    (root / "benchmarks" / "gpu" / "suite.sh").write_text(slow)
    env = dict(os.environ, PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}", OUT=str(tmp_path / "out"))
    (tmp_path / "out").mkdir()
    lanes = [f"RES=r/ab ARMS=xgb SEEDS={i}" for i in range(4)]
    proc = subprocess.Popen(["bash", "benchmarks/gpu/lanes.sh", *lanes], cwd=root, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    try:
        out = tmp_path / "out"
        bundled = lambda i: (out / f"lane{i}.tar").exists() and not (out / f"lane{i}").exists()  # noqa: E731
        deadline = time.monotonic() + 20  # lanes 0-2 end after about a second; lane 3 after about 31
        while not all(bundled(i) for i in range(3)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert proc.poll() is None, "lane 3 should still run"
        for i in range(3):
            with tarfile.open(out / f"lane{i}.tar") as tar:
                assert {f"lane{i}/env.txt", f"lane{i}/lane.log"} <= set(tar.getnames())
        assert not (out / "lane3.tar").exists() and (out / "lane3.log").exists()
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()
