"""benchmarks/collect_speed.py with --root and --keep: each mode tops up its own copy of a planned
record tree (real llvm collection, real processes), the table has a row a mode, and the kept trees
merge into the dataset without a record twice (MetaSchedule's threaded sampling does not repeat its
schedules run to run, so the two modes' trees overlap only in part)."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from data.collect import count_records, main

REPO = Path(__file__).resolve().parents[1]
TARGET = '{"kind": "llvm", "num-cores": 2}'


def _run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True, check=check)


@pytest.fixture(scope="module")
def planned(tmp_path_factory) -> Path:
    """A record tree whose one task is planned, not measured (`data.collect --plan-only`, in this
    process: planning an operator starts no worker), shared by the tests; copy it to change it."""
    root = tmp_path_factory.mktemp("planned") / "root"
    main(["--target", TARGET, "--workload", "matmul:64,64,64", "--per-task", "6", "--plan-only", "--out", str(root)])
    return root


def test_root_modes_keep_and_merge(planned, tmp_path):
    root = tmp_path / "root"
    shutil.copytree(planned, root)
    (device,) = [p for p in root.iterdir() if p.is_dir()]
    (task,) = [p for p in device.iterdir() if p.is_dir()]
    assert count_records(task)[0] == 0
    keep = tmp_path / "keep"
    done = _run("benchmarks/collect_speed.py", "--target", TARGET, "--root", str(root), "--per-task", "6",
                "--modes", "sequential", "pipelined", "--keep", str(keep), "--workers", "1", "--repeat", "2",
                "--min-repeat-ms", "1")  # fmt: skip
    rows = [ln for ln in done.stdout.splitlines() if ln.startswith("| sequential") or ln.startswith("| pipelined")]
    assert len(rows) == 2 and all("| 6 (" in r for r in rows), done.stdout
    assert count_records(task)[0] == 0  # the root itself is untouched: each mode topped up a copy
    kept = {m: keep / m / device.name / task.name for m in ("sequential", "pipelined")}
    assert all(count_records(t)[0] == 6 for t in kept.values())
    first = _run("-m", "data.merge", str(keep / "pipelined"), str(root)).stdout
    second = _run("-m", "data.merge", str(keep / "sequential"), str(root)).stdout
    added = [re.search(r"(\d+) records added, (\d+) already stored", out).groups() for out in (first, second)]
    assert added[0] == ("6", "0") and int(added[1][0]) + int(added[1][1]) == 6, (first, second)
    assert count_records(task)[0] == 6 + int(added[1][0])  # the union, each schedule once
    again = _run("-m", "data.merge", str(keep / "sequential"), str(root)).stdout
    assert "0 records added, 6 already stored" in again


def test_bad_arguments_are_named(planned, tmp_path):
    root = planned
    no_per_task = _run("benchmarks/collect_speed.py", "--target", TARGET, "--root", str(root), check=False)
    assert no_per_task.returncode != 0 and "--root needs --per-task" in no_per_task.stderr
    both = _run("benchmarks/collect_speed.py", "--target", TARGET, "--root", str(root), "--per-task", "6",
                "--workload", "matmul:8,8,8", check=False)  # fmt: skip
    assert both.returncode != 0 and "or --root" in both.stderr
    missing = _run("benchmarks/collect_speed.py", "--target", TARGET, "--root", str(tmp_path / "nope"),
                   "--per-task", "6", check=False)  # fmt: skip
    assert missing.returncode != 0 and "no such folder" in missing.stderr
    (tmp_path / "keep").mkdir()
    exists = _run("benchmarks/collect_speed.py", "--target", TARGET, "--root", str(root), "--per-task", "6",
                  "--keep", str(tmp_path / "keep"), check=False)  # fmt: skip
    assert exists.returncode != 0 and "exists" in exists.stderr
