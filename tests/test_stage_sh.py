"""benchmarks/gpu/stage.sh in a real git work tree: `out lean` moves what a suite call does not need,
leaves the kept results folder's arm CSVs as empty files (a device run only asks whether they exist),
and `in` puts every byte back."""

import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

FILES = {
    "benchmarks/gpu/stage.sh": None,  # the real script
    "benchmarks/tuning.py": "kept\n",
    "benchmarks/quality.py": "staged\n",
    "benchmarks/results/tuning_240/dense_8x8x8/xgb-s0.csv": "task,round\nd,1\n",
    "benchmarks/results/tuning_240/dense_8x8x8/moa-s1.csv": "task,round\nd,2\n",
    "benchmarks/results/tuning_240/eager.json": '{"dense:8,8,8": 0.01}\n',
    "benchmarks/results/quality/q.json": "{}\n",
    "data/embedded/cpu/index.json": "{}\n",
    "docs/benchmarks.md": "# numbers\n",
}


def _write(tree: Path, files: dict[str, str | None]) -> None:
    """The files under `tree` (None: the repository's own copy)."""
    for rel, text in files.items():
        path = tree / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text if text is not None else (REPO / rel).read_text())


def _git(tree: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=tree, capture_output=True, text=True, check=True).stdout


def _stage(tree: Path, *args: str) -> str:
    env = {"PATH": "/usr/bin:/bin", "RES": "benchmarks/results/tuning_240", "STAGE": str(tree.parent / "stage")}
    done = subprocess.run(
        ["bash", "benchmarks/gpu/stage.sh", *args], cwd=tree, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_lean_staging_leaves_empty_arm_csvs_and_puts_everything_back(tmp_path):
    tree = tmp_path / "tree"
    for rel, text in FILES.items():
        path = tree / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if text is None:
            shutil.copy2(REPO / rel, path)
        else:
            path.write_text(text)
    _git(tree, "init", "-q")
    _git(tree, "add", "-A")
    before = _git(tree, "status", "--porcelain")

    _stage(tree, "out", "lean")
    res = tree / "benchmarks/results/tuning_240"
    for arm in ("dense_8x8x8/xgb-s0.csv", "dense_8x8x8/moa-s1.csv"):
        assert (res / arm).exists() and (res / arm).stat().st_size == 0, arm  # an arm the run skips
    assert (res / "eager.json").read_text() == FILES["benchmarks/results/tuning_240/eager.json"]
    assert (tree / "benchmarks/tuning.py").exists() and (tree / "benchmarks/gpu/stage.sh").exists()
    for gone in ("benchmarks/quality.py", "benchmarks/results/quality", "data/embedded", "docs"):
        assert not (tree / gone).exists(), gone
    assert (tmp_path / "stage/benchmarks/results/tuning_240/dense_8x8x8/xgb-s0.csv").read_text() == "task,round\nd,1\n"

    _stage(tree, "in")
    for rel, text in FILES.items():
        assert (tree / rel).read_text() == (text if text is not None else (REPO / rel).read_text()), rel
    assert _git(tree, "status", "--porcelain") == before
    assert not (tmp_path / "stage").exists()


def test_a_results_folder_under_ablations_is_kept_and_its_siblings_go(tmp_path):
    tree = tmp_path / "tree"
    files = {
        "benchmarks/gpu/stage.sh": None,
        "benchmarks/results/ablations/convs_ab/conv_1x1/xgb-s0.csv": "task,round\nc,1\n",
        "benchmarks/results/ablations/gate/conv_1x1/pruner-s0.csv": "task,round\ng,1\n",
        "benchmarks/results/tuning/conv_1x1/xgb-s0.csv": "task,round\nt,1\n",
    }
    _write(tree, files)
    _git(tree, "init", "-q")
    _git(tree, "add", "-A")
    before = _git(tree, "status", "--porcelain")
    env = {"PATH": "/usr/bin:/bin", "RES": "benchmarks/results/ablations/convs_ab", "STAGE": str(tmp_path / "stage")}
    done = subprocess.run(["bash", "benchmarks/gpu/stage.sh", "out", "lean"], cwd=tree, env=env, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    kept = tree / "benchmarks/results/ablations/convs_ab/conv_1x1/xgb-s0.csv"
    assert kept.exists() and kept.stat().st_size == 0  # the placeholder of an arm the tree has
    assert not (tree / "benchmarks/results/ablations/gate").exists()
    assert not (tree / "benchmarks/results/tuning").exists()
    done = subprocess.run(["bash", "benchmarks/gpu/stage.sh", "in"], cwd=tree, env=env, capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert kept.read_text() == "task,round\nc,1\n" and _git(tree, "status", "--porcelain") == before


def test_noxgb_moves_the_kits_xgboost_parts_out_and_back(tmp_path):
    tree = tmp_path / "tree"
    files = {"benchmarks/gpu/stage.sh": None, "benchmarks/weights/pam.pt": "weights\n"}
    _write(tree, files)
    kit = {"libxgboost.so.xz": b"x" * 100, "xgboost_py.tar.xz": b"p" * 50, "tvm_py.tar.xz": b"t" * 10}
    (tree / ".devkit").mkdir()
    for name, data in kit.items():
        (tree / ".devkit" / name).write_bytes(data)
    _git(tree, "init", "-q")
    _git(tree, "add", "benchmarks")
    _stage(tree, "out", "lean", "noxgb")
    assert sorted(p.name for p in (tree / ".devkit").iterdir()) == ["tvm_py.tar.xz"]
    assert (tree / "benchmarks/weights/pam.pt").exists()  # what a moa call needs stays
    _stage(tree, "in")
    assert {p.name: p.read_bytes() for p in (tree / ".devkit").iterdir()} == kit


def test_an_earlier_staging_not_put_back_is_refused_and_nothing_moves(tmp_path):
    """A staging folder left from an earlier `out` would take each folder in as X/X, and `in` would put the
    stale copies back over the tree: `out` refuses it, naming the folder, and leaves the tree as it was."""
    tree = tmp_path / "tree"
    files = {"benchmarks/gpu/stage.sh": None, "docs/benchmarks.md": "# new numbers\n"}
    _write(tree, files)
    stale = tmp_path / "stage/docs/benchmarks.md"
    stale.parent.mkdir(parents=True)
    stale.write_text("# old numbers\n")
    env = {"PATH": "/usr/bin:/bin", "STAGE": str(tmp_path / "stage")}
    done = subprocess.run(["bash", "benchmarks/gpu/stage.sh", "out", "lean"], cwd=tree, env=env, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode == 3 and str(tmp_path / "stage") in done.stderr and "earlier staging" in done.stderr
    assert (tree / "docs/benchmarks.md").read_text() == "# new numbers\n"
    assert not (tmp_path / "stage/docs/docs").exists() and stale.read_text() == "# old numbers\n"


def _benchmark_imports(module: str, seen: set[str]) -> set[str]:
    """The `benchmarks` modules `module` imports (at any depth of the file), and theirs, recursively."""
    import ast

    seen.add(module)
    tree = ast.parse((REPO / "benchmarks" / f"{module}.py").read_text())
    for node in ast.walk(tree):
        names = [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
        names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
        for name in names:
            if name.startswith("benchmarks."):
                sub = name.split(".")[1]
                if sub not in seen and (REPO / "benchmarks" / f"{sub}.py").exists():
                    _benchmark_imports(sub, seen)
    return seen


def test_lean_staging_keeps_every_benchmarks_module_a_suite_arm_imports():
    """A device run of the suite imports tuning.py and, from it, other benchmarks modules: `lean` must
    keep each (a module split out of tuning.py and not kept would fail every device call)."""
    script = (REPO / "benchmarks/gpu/stage.sh").read_text()
    kept = {
        p.strip().removeprefix("benchmarks/").removesuffix(".py")
        for p in script.split('case "$f" in ', 1)[1].split(")", 1)[0].replace("\\\n", "").split("|")
    }
    needed = _benchmark_imports("tuning", set())
    assert {"tuning", "suite_report", "suite_variants", "suite_shards", "suite_eager", "eager"} <= needed
    assert needed <= kept, needed - kept
