"""The host's CPU seconds in a tuning run: this process (all its threads: the search, TVM's thread
pool) and its child processes (the build workers' NVRTC compiles, the walk pool, the runner's
workers), read from /proc.

A run's curve logs them a round (`bridge.search_log.SearchLog`, `host_cpu_s`), and
`bridge.curve.host_cpu_busy` gives the share of the host's cores they kept busy: a search that is
slow because the host's cores are all taken (the H200 machines' 16 cores were worth three to four of
the 2-core dev VM's on MetaSchedule's evolution; docs/benchmarks.md, "Where a draft's time goes on 16
cores") reads near 100%, one that waits on something else reads low. Linux only: elsewhere the
seconds read as NaN.
"""

from __future__ import annotations

import math
import os

__all__ = ["children", "cpu_seconds", "host_seconds"]

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat(pid: int | str) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name, or None where it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def cpu_seconds(pid: int | str = "self") -> float:
    """User + system CPU seconds of process `pid` (all its threads) so far; 0.0 once it is gone."""
    fields = _stat(pid)
    return 0.0 if fields is None else (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime


def children(pid: int | None = None) -> list[int]:
    """The live child processes of `pid` (default: this process); none where there is no /proc."""
    pid = os.getpid() if pid is None else pid
    kids = []
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if entry.isdigit() and (fields := _stat(entry)) is not None and fields[1] == str(pid):
            kids.append(int(entry))
    return kids


def host_seconds() -> float:
    """CPU seconds of this process, of its children that ended (reaped: cutime, cstime) and of its
    live children, so far; NaN where /proc cannot be read. Grandchildren that live on are not
    counted (our workers start none)."""
    fields = _stat("self")
    if fields is None:
        return math.nan
    own = sum(int(fields[i]) for i in (11, 12, 13, 14)) / _TICK  # utime, stime, cutime, cstime
    return own + sum(cpu_seconds(k) for k in children())
