"""benchmarks/gpu/pylib.sh: the device scripts' jsonargparse, unpacked from .devkit/pylib.tar.xz.

Two lanes of one device call sourced it at once and one lane's Python read a half-written module
(2026-11-30). The real script, on a real xz tar of two modules, into a folder under tmp_path (PYLIB).
"""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _project(tmp_path: Path, body: str) -> Path:
    root = tmp_path / "project"
    (root / ".devkit").mkdir(parents=True)
    src = tmp_path / "src"
    (src / "fakelib").mkdir(parents=True)
    (src / "fakelib" / "__init__.py").write_text(body)
    with tarfile.open(root / ".devkit" / "pylib.tar.xz", "w:xz") as tar:
        tar.add(src / "fakelib", arcname="fakelib")
    return root


def _source(root: Path, pylib: Path, then: str = 'python3 -c "import fakelib; print(fakelib.VALUE)"'):
    script = f"source {ROOT / 'benchmarks' / 'gpu' / 'pylib.sh'} || exit 1; {then}"
    env = dict(os.environ, PYLIB=str(pylib))
    return subprocess.Popen(
        ["bash", "-c", script], cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_many_at_once_all_import_it_whole(tmp_path):
    root = _project(tmp_path, "PAD = '" + "x" * 4_000_000 + "'\nVALUE = 20000\n")  # large: a half-written one shows
    pylib = tmp_path / "pylib"
    runs = [_source(root, pylib) for _ in range(6)]
    outs = [(r.communicate(timeout=120), r.returncode) for r in runs]
    for (out, err), rc in outs:
        assert rc == 0, err
        assert out.strip() == "20000"
    assert len(list(pylib.glob(".unpacked-*"))) == 1
    assert [p.name for p in tmp_path.glob("pylib.*")] == ["pylib.lock"], "an unpack's folder was left behind"


def test_it_unpacks_once_and_again_when_the_tar_changes(tmp_path):
    root = _project(tmp_path, "VALUE = 1\n")
    pylib = tmp_path / "pylib"
    out, err = _source(root, pylib).communicate(timeout=60)
    assert out.strip() == "1", err
    marker = next(pylib.glob(".unpacked-*"))
    (pylib / "fakelib" / "__init__.py").write_text("VALUE = 'kept'\n")  # a second source must not unpack
    out, _ = _source(root, pylib).communicate(timeout=60)
    assert out.strip() == "kept"
    root2 = _project(tmp_path / "other", "VALUE = 2\n")  # a new tar: unpacked afresh, the old folder replaced
    out, err = _source(root2, pylib).communicate(timeout=60)
    assert out.strip() == "2", err
    assert not marker.exists()
