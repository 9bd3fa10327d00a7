"""The tuning suite's vendor-library reference times: RESULTS/eager.json, one median a workload.

`tuning.py --eager` times each operator workload (not `net:` ones) in torch eager mode on the first
GPU (`benchmarks.eager.eager_ms`, imported only then: torch is not loaded otherwise), once a results
folder: a time already in the file is kept. Lanes of one device call share a results folder and
write at about the same time, so the file is merged under a lock.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from data.atomic import atomic_write_text

__all__ = ["eager_times", "merge_eager"]


def merge_eager(path: Path, times: dict[str, float]) -> None:
    """Add `times` to the eager times in `path` (a time already there is kept) and write it back,
    under a lock: lanes of one device call share a results folder, and each writes its own
    workloads' times (a plain read-then-write lost another lane's)."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    folder = os.open(path.parent, os.O_RDONLY)  # the lock: the folder itself, so no lock file is left
    try:
        fcntl.flock(folder, fcntl.LOCK_EX)
        known = json.loads(path.read_text()) if path.exists() else {}
        atomic_write_text(path, json.dumps({**times, **known}, indent=1))
    finally:
        os.close(folder)  # closing the descriptor releases the lock


def eager_times(workloads: list[str], results: Path) -> None:
    """Median milliseconds of each operator in torch eager mode on GPU 0 -> RESULTS/eager.json."""
    from benchmarks.eager import eager_ms

    path = results / "eager.json"
    known = json.loads(path.read_text()) if path.exists() else {}
    times = {}
    for w in workloads:
        if w not in known and not w.startswith("net:"):
            times[w] = eager_ms(w)
            print(f"eager {w}: {times[w]:.4f} ms", flush=True)
    merge_eager(path, times)
