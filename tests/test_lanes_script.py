"""benchmarks/gpu/lanes.sh: one suite.sh per GPU, each with its lane's settings, GPU, cores and folders.

No GPU here: `nvidia-smi` is a stand-in that lists two GPUs, and `suite.sh` a stand-in that writes
the environment and CPU affinity it was started with; the script under test is the real one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SUITE_STANDIN = """#!/usr/bin/env bash
{ for v in CUDA_VISIBLE_DEVICES GPUS TVM_NUM_THREADS OUT WORK LIMIT RES ARMS REDRAFT_STALL PIPELINE; do
    echo "$v=${!v-}"; done
  grep Cpus_allowed_list /proc/self/status; } > "$OUT/env.txt"
echo "lane done"
"""


def _project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "benchmarks" / "gpu").mkdir(parents=True)
    shutil.copy(ROOT / "benchmarks" / "gpu" / "lanes.sh", root / "benchmarks" / "gpu" / "lanes.sh")
    (root / "benchmarks" / "gpu" / "suite.sh").write_text(SUITE_STANDIN)
    (root / ".devkit").mkdir()
    (root / ".devkit" / "use-devkit.sh").write_text("true\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H100'\necho 'GPU 1: NVIDIA H100'\n")
    smi.chmod(0o755)
    return root


def _run(root: Path, tmp_path: Path, *lanes: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}", OUT=str(tmp_path / "out"))
    (tmp_path / "out").mkdir(exist_ok=True)
    cmd = ["bash", "benchmarks/gpu/lanes.sh", *lanes]
    return subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=60)


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
    lanes = []
    for i in range(2):
        text = (tmp_path / "out" / f"lane{i}" / "env.txt").read_text()
        lanes.append(dict(line.split("=", 1) if "=" in line else line.split(":\t") for line in text.splitlines()))
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


def test_more_lanes_than_gpus_is_refused(tmp_path):
    root = _project(tmp_path)
    done = _run(root, tmp_path, "ARMS=xgb", "ARMS=pruner", "ARMS=moa")
    assert done.returncode == 2 and "3 lanes for 2 GPUs" in done.stderr
    assert not list((tmp_path / "out").glob("lane*"))
