"""The host's CPU seconds in a tuning run: this process (all its threads: the search, TVM's thread
pool) and its child processes (the build workers' NVRTC compiles, the walk pool, the runner's
workers), read from /proc.

A run's curve logs them a round (`bridge.search_log.SearchLog`, `host_cpu_s`), and
`bridge.curve.host_cpu_busy` gives the share of the host's cores they kept busy: a search that is
slow because the host's cores are all taken (the H200 machines' 16 cores were worth three to four of
the 2-core dev VM's on MetaSchedule's evolution; docs/benchmarks.md, "Where a draft's time goes on 16
cores") reads near 100%, one that waits on something else reads low. It is the run's own use of the
cores it may run on: another program's load on the host does not show. Linux only: elsewhere
`host_seconds` reads NaN (and `cpu_seconds` 0, `children` none).
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


def _children_stats(pid: int) -> dict[int, list[str]]:
    """The stat fields of each live child process of `pid` (zombies included: their seconds stay in
    their own stat until they are reaped), each read once."""
    kids = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if entry.isdigit() and (fields := _stat(entry)) is not None and fields[1] == str(pid):
            kids[int(entry)] = fields
    return kids


def children(pid: int | None = None) -> list[int]:
    """The live child processes of `pid` (default: this process); none where there is no /proc."""
    return list(_children_stats(os.getpid() if pid is None else pid))


def _with_reaped(fields: list[str]) -> float:
    """utime + stime + cutime + cstime: a process's own seconds and those of its children that it
    reaped (what the kernel adds to its parent's cutime and cstime when it is reaped in turn)."""
    return sum(int(fields[i]) for i in (11, 12, 13, 14)) / _TICK


def host_seconds(attempts: int = 3) -> float:
    """CPU seconds so far of this process, of its children that ended, and of its live children with
    the children they reaped (a worker's `tar` and link steps); NaN where /proc cannot be read.

    One snapshot: this process's stat is read before and after its children's, and read again while
    a child was reaped in between (it would be in neither reading), up to `attempts` times. A
    grandchild still running is not counted until its parent reaps it."""
    for _ in range(max(1, attempts)):
        before = _stat("self")
        if before is None:
            return math.nan
        kids = _children_stats(os.getpid())
        after = _stat("self")
        if after is not None and after[13:15] == before[13:15]:  # no child reaped meanwhile
            break
    return _with_reaped(after if after is not None else before) + sum(_with_reaped(f) for f in kids.values())
