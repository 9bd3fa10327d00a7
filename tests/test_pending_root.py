"""benchmarks/gpu/pending_root.py: the unfinished tasks of a record tree, copied into a root that a
device call can carry, then merged back without losing or duplicating a record (real files, CLI).

The script runs in this process (`main(argv)`, what `python benchmarks/gpu/pending_root.py` runs;
its own process costs a TVM import, ~7 s), except once, where its exit status and error line are
what the test checks."""

import contextlib
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

from benchmarks.gpu import pending_root
from data.collect import count_records

REPO = Path(__file__).resolve().parents[1]
TREE = REPO / "tests" / "fixtures" / "tiny_records"
DEVICE = "llvm-sapphirerapids-2c"


def _tree(tmp_path: Path) -> Path:
    """The tiny tree with matmul cut to 10 records (unfinished) and conv2d left at 24, both in a network."""
    root = tmp_path / "tree"
    shutil.copytree(TREE, root)
    records = root / DEVICE / "matmul_e87e4aed" / "database_tuning_record.json"
    records.write_text("".join(records.read_text().splitlines(keepends=True)[:10]))
    index_path = root / DEVICE / "index.json"
    index = json.loads(index_path.read_text())
    index["networks"] = {
        "net_a": [["matmul_e87e4aed", 2], ["conv2d_nhwc_e7d8f54e", 1]],
        "net_b": [["conv2d_nhwc_e7d8f54e", 1]],
    }
    index_path.write_text(json.dumps(index))
    return root


def _main(*argv: str) -> tuple[int, str, str]:
    """`pending_root.main(argv)` in this process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = pending_root.main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def _pending(root: Path, out: Path, per_task: int) -> str:
    code, stdout, stderr = _main("--root", root, "--out", out, "--per_task", per_task)
    assert code == 0, stderr
    return stdout


def test_copies_only_unfinished_tasks_with_their_index_rows(tmp_path):
    root = _tree(tmp_path)
    assert "1 unfinished tasks copied" in _pending(root, tmp_path / "pending", 24)
    device = tmp_path / "pending" / DEVICE
    assert sorted(p.name for p in device.iterdir()) == ["index.json", "matmul_e87e4aed"]
    assert count_records(device / "matmul_e87e4aed") == count_records(root / DEVICE / "matmul_e87e4aed")
    index = json.loads((device / "index.json").read_text())
    assert list(index["tasks"]) == ["matmul_e87e4aed"]
    assert index["networks"] == {"net_a": [["matmul_e87e4aed", 2]]}  # net_b had no unfinished task
    assert index["target"] == json.loads((root / DEVICE / "index.json").read_text())["target"]


def test_merging_the_copy_back_adds_nothing_twice(tmp_path):
    root = _tree(tmp_path)
    _pending(root, tmp_path / "pending", 24)
    before = {t.name: count_records(t) for t in (root / DEVICE).iterdir() if t.is_dir()}
    merged = subprocess.run(
        [sys.executable, "-m", "data.merge", str(tmp_path / "pending"), str(root)],
        cwd=REPO, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert "0 records added, 10 already stored" in merged.stdout
    assert {t.name: count_records(t) for t in (root / DEVICE).iterdir() if t.is_dir()} == before


def test_refuses_an_existing_device_folder(tmp_path):
    root = _tree(tmp_path)
    _pending(root, tmp_path / "pending", 24)
    again = subprocess.run(
        [sys.executable, "benchmarks/gpu/pending_root.py", "--root", str(root), "--out", str(tmp_path / "pending"), "--per_task", "24"],
        cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip
    assert again.returncode == 2 and "error: " in again.stderr and "exists; remove it first" in again.stderr
    assert "Traceback" not in again.stderr


def test_parts_split_the_tasks_over_roots(tmp_path):
    root = _tree(tmp_path)
    code, stdout, _ = _main("--root", root, "--out", tmp_path / "p", "--per_task", "1000", "--parts", "2")
    assert code == 0 and "2 unfinished tasks copied" in stdout
    tasks = []
    for part in ("p1", "p2"):
        device = tmp_path / part / DEVICE
        (task,) = [p.name for p in device.iterdir() if p.is_dir()]
        index = json.loads((device / "index.json").read_text())
        assert list(index["tasks"]) == [task]
        assert all(row[0] == task for rows in index["networks"].values() for row in rows)
        tasks.append(task)
    assert sorted(tasks) == ["conv2d_nhwc_e7d8f54e", "matmul_e87e4aed"]
    code, _, stderr = _main("--root", root, "--out", tmp_path / "q", "--per_task", "10", "--parts", "0")
    assert code == 2 and "parts=0 must be at least 1" in stderr


def test_networks_and_without_networks_choose_the_tasks(tmp_path):
    root = _tree(tmp_path)  # matmul: net_a only; conv2d: net_a and net_b
    args = ["--root", root, "--per_task", "1000"]
    code, stdout, _ = _main(*args, "--out", tmp_path / "b", "--networks", "[net_b]")
    assert code == 0 and "1 unfinished tasks copied" in stdout
    assert json.loads((tmp_path / "b" / DEVICE / "index.json").read_text())["networks"] == {
        "net_a": [["conv2d_nhwc_e7d8f54e", 1]],
        "net_b": [["conv2d_nhwc_e7d8f54e", 1]],
    }
    code, stdout, _ = _main(*args, "--out", tmp_path / "a", "--networks", "[net_a]", "--without_networks", "[net_b]")
    assert code == 0 and "1 unfinished tasks copied" in stdout
    assert sorted(p.name for p in (tmp_path / "a" / DEVICE).iterdir()) == ["index.json", "matmul_e87e4aed"]
    code, _, stderr = _main(*args, "--out", tmp_path / "c", "--networks", "[net_z]")
    assert code == 2 and "no network 'net_z'" in stderr and "net_a, net_b" in stderr
    assert not (tmp_path / "c").exists()
