"""The one atomic-write helper: a file appears whole or not at all, whatever kills the process.

Every file the project writes that a crash could tear (record databases' compressed copies, shards,
manifests, artifacts, cost-model states, tuning curves, plots) goes through `atomic_path`: the
writer fills a hidden temp file in the same folder (same file system), which replaces the target
with `os.replace` only once it is complete and flushed; on an exception the temp file is removed.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

__all__ = ["atomic_path", "atomic_write_bytes", "atomic_write_text"]


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str = "") -> Iterator[Path]:
    """Yield a temp path next to `path`; on a clean exit it replaces `path` atomically.

    Args:
        path: the file to (re)write; its folder is created if missing.
        suffix: ending of the temp name, for writers that pick a format by extension (".png").
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp{suffix}"
    try:
        yield tmp
        with open(tmp, "rb+") as f:  # flush to disk before the rename makes it visible
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write `data` to `path` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write `text` (UTF-8) to `path` atomically."""
    atomic_write_bytes(path, text.encode())
