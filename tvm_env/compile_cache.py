"""NVRTC's output kept by the CUDA source it was compiled from, in a folder a build pool's workers share.

Schedules that MetaSchedule tells apart can generate the same code: how a loop is split does not
show once both parts are unrolled. In the suite's H200 runs, 9-36% of Pruner's trials repeated a
kernel it had built before (`benchmarks/kernel_repeats.py`, docs/benchmarks.md), and NVRTC, most of a
CUDA build's time, compiled each of them again. With a folder set (`set_folder`; `PooledLocalBuilder`
sets its own in every batch), `compiled` looks up the source's hash there first, so a repeated kernel
costs its lowering and code generation only. Entries are written whole (a temporary file, then a
rename), so a worker never reads one half written; two workers that compile the same kernel at once
both compile it and one entry stays. The folder is the builder's own temporary folder: its entries
are bytes this process's workers wrote, handed to the CUDA driver as the build's output would be.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Callable

__all__ = ["compiled", "hits", "set_folder"]

_folder: str | None = None
_hits = 0


def set_folder(folder: str | None) -> None:
    """Keep this process's compiles in `folder` (None: compile every time)."""
    global _folder
    _folder = folder


def hits() -> int:
    """How many compiles this process took from the folder so far."""
    return _hits


def compiled(code: str, salt: Callable[[], str], compile: Callable[[], bytes | bytearray]) -> bytearray:
    """`compile()`'s output for `code`: from the folder when an entry for `code` and `salt()` (what else
    the output depends on: the compiler, its version and options, the architecture; asked only with a
    folder) is there, else compiled and stored. Without a folder, or with one that cannot be written,
    it only compiles."""
    global _hits
    if _folder is None:
        return bytearray(compile())
    name = hashlib.sha256(f"{salt()}\0{code}".encode()).hexdigest()
    path = os.path.join(_folder, name)
    try:
        with open(path, "rb") as f:
            out = bytearray(f.read())
        _hits += 1
        return out
    except OSError:  # not there yet (or the folder is gone): compile
        pass
    out = bytearray(compile())
    try:
        fd, tmp = tempfile.mkstemp(dir=_folder, prefix=".part-")
    except OSError:  # a folder removed under a late build: the build is still good
        return out
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(out)
        os.replace(tmp, path)
    except OSError:  # a full disk: no entry, and no part left behind
        with contextlib.suppress(OSError):
            os.remove(tmp)
    return out
