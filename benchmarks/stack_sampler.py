"""Where one thread's wall time goes, and how many cores are busy meanwhile: a sampling profiler.

Every `interval` seconds a background thread reads the watched thread's Python stack
(`sys._current_frames`) and names the innermost frame in this project's code (file:line and
function; a call into TVM's C++ shows as the project line that made it). It also reads the CPU
seconds of this process (all its threads: TVM's thread pool included) and of its child processes
(the walk pool's workers, the build workers) from /proc, and charges the CPU used since the last
sample to the site the thread is at. So each site gets its wall seconds and the cores it kept busy,
here and in the children: a C++ call that keeps 16 cores busy shows 16, one that runs serially 1.

No dependency (py-spy and the like are not on the device machines). Linux only (/proc): elsewhere
CPU seconds read as 0.
`benchmarks/draft_round.py --profile` uses it.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

from bridge.host_cpu import children, cpu_seconds

__all__ = ["StackSampler"]

_ROOT = Path(__file__).resolve().parents[1]


class StackSampler:
    """Samples the thread `thread_name` picks (a thread whose name starts with it; else the main
    thread) every `interval` seconds while the `with` block runs; `rows()` gives, per site, the wall
    seconds, their share, and the cores busy in this process and in its children meanwhile."""

    def __init__(self, interval: float = 0.02, thread_name: str = "pruner-draft"):
        self.interval, self.thread_name = interval, thread_name
        self.wall: dict[str, float] = defaultdict(float)
        self.cpu_self: dict[str, float] = defaultdict(float)
        self.cpu_children: dict[str, float] = defaultdict(float)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> StackSampler:
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="stack-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _watched(self) -> int | None:
        for t in threading.enumerate():
            if t.name.startswith(self.thread_name):
                return t.ident
        return threading.main_thread().ident

    def _site(self, frame) -> str:
        while frame is not None:
            path = Path(frame.f_code.co_filename)
            if path.is_relative_to(_ROOT) and ".venv" not in path.parts and path.name != Path(__file__).name:
                return f"{path.relative_to(_ROOT)}:{frame.f_lineno} {frame.f_code.co_name}"
            frame = frame.f_back
        return "(outside the project)"

    def _loop(self) -> None:
        me, kids, kids_at = os.getpid(), [], 0.0
        last_t, last_self = time.perf_counter(), cpu_seconds()
        last_kids: dict[int, float] = {}
        while not self._stop.wait(self.interval):
            now = time.perf_counter()
            if now - kids_at > 1.0:  # pools start and end: look for children once a second
                kids, kids_at = children(me), now
            frame = sys._current_frames().get(self._watched())
            site = self._site(frame)
            cpu_self = cpu_seconds()
            cpu_kids = {k: cpu_seconds(k) for k in kids}
            self.wall[site] += now - last_t
            self.cpu_self[site] += cpu_self - last_self
            self.cpu_children[site] += sum(max(0.0, v - last_kids.get(k, v)) for k, v in cpu_kids.items())
            last_t, last_self, last_kids = now, cpu_self, cpu_kids

    def rows(self, top: int = 12) -> list[tuple[str, float, float, float, float]]:
        """(site, wall s, share of the sampled wall time, cores busy here, cores busy in the children),
        the `top` sites by wall time, then the rest summed as 'other'."""
        total = sum(self.wall.values()) or 1.0
        sites = sorted(self.wall, key=self.wall.get, reverse=True)

        def row(name: str, keys: list[str]) -> tuple[str, float, float, float, float]:
            wall = sum(self.wall[k] for k in keys)
            per = max(wall, 1e-9)
            return (
                name,
                wall,
                wall / total,
                sum(self.cpu_self[k] for k in keys) / per,
                sum(self.cpu_children[k] for k in keys) / per,
            )

        out = [row(s, [s]) for s in sites[:top]]
        if sites[top:]:
            out.append(row("other", sites[top:]))
        return out
