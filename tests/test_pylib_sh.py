"""benchmarks/gpu/pylib.sh: the device scripts' jsonargparse, unpacked from .devkit/pylib.tar.xz.

Two lanes of one device call sourced it at once and one lane's Python read a half-written module
(2026-11-30). The real script, on a real xz tar of a module, into folders under tmp_path (PYLIB).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(shutil.which("flock") is None, reason="pylib.sh needs flock (util-linux)")


def _project(tmp_path: Path, body: str, train: str | None = None) -> Path:
    """A project folder whose .devkit/pylib.tar.xz holds `fakelib` (and .trainkit/trainlib.tar.xz `trainlib`)."""
    root = tmp_path / "project"
    for kit, tar_name, module, text in (
        (".devkit", "pylib.tar.xz", "fakelib", body),
        (".trainkit", "trainlib.tar.xz", "trainlib", train),
    ):
        if text is None:
            continue
        src = tmp_path / "src" / module
        src.mkdir(parents=True)
        (src / "__init__.py").write_text(text)
        (root / kit).mkdir(parents=True)
        with tarfile.open(root / kit / tar_name, "w:xz") as tar:
            tar.add(src, arcname=module)
    return root


def _source(root: Path, prefix: Path, then: str = 'python3 -c "import fakelib; print(fakelib.VALUE)"'):
    script = f"source {ROOT / 'benchmarks' / 'gpu' / 'pylib.sh'} || exit 1; {then}"
    env = dict(os.environ, PYLIB=str(prefix))
    return subprocess.Popen(
        ["bash", "-c", script], cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_many_at_once_all_import_it_whole(tmp_path):
    root = _project(tmp_path, "PAD = '" + "x" * 4_000_000 + "'\nVALUE = 20000\n")  # large: a half-written one shows
    runs = [_source(root, tmp_path / "pylib") for _ in range(6)]
    for run in runs:
        out, err = run.communicate(timeout=120)
        assert run.returncode == 0, err
        assert out.strip() == "20000"
    folders = sorted(p.name for p in tmp_path.glob("pylib*"))
    assert len(folders) == 2 and folders[1] == folders[0] + ".lock", folders  # one folder, its lock: no leftovers
    assert (tmp_path / folders[0] / ".unpacked").exists()


def test_it_unpacks_once_a_content_and_a_new_tar_gets_a_folder_of_its_own(tmp_path):
    root = _project(tmp_path, "VALUE = 1\n", train="T = 't'\n")
    prefix = tmp_path / "pylib"
    out, err = _source(
        root, prefix, 'python3 -c "import fakelib, trainlib; print(fakelib.VALUE, trainlib.T)"'
    ).communicate(timeout=60)
    assert out.strip() == "1 t", err  # both tars
    (first,) = [p for p in tmp_path.glob("pylib-*") if p.is_dir()]
    (first / "fakelib" / "__init__.py").write_text("VALUE = 'kept'\n")  # a second source must not unpack again
    out, _ = _source(root, prefix).communicate(timeout=60)
    assert out.strip() == "kept"
    other = _project(
        tmp_path / "other", "VALUE = 2\n"
    )  # another tar: its own folder; the first stays for whoever uses it
    out, err = _source(other, prefix).communicate(timeout=60)
    assert out.strip() == "2", err
    assert (first / "fakelib" / "__init__.py").read_text() == "VALUE = 'kept'\n"


def test_a_failed_unpack_says_so_and_leaves_nothing(tmp_path):
    root = _project(tmp_path, "VALUE = 1\n")
    (root / ".devkit" / "pylib.tar.xz").write_bytes(b"not an xz tar")
    run = _source(root, tmp_path / "pylib")
    _, err = run.communicate(timeout=60)
    assert run.returncode != 0 and "pylib.sh: could not unpack" in err
    assert [p.name for p in tmp_path.glob("pylib*")] == [p.name for p in tmp_path.glob("pylib-*.lock")]
