"""Tuning-database records replayed into schedules: each record's trace applied to its workload.

A resumed run replays its task's records to know what it measured (`bridge.search`), to catch its
cost model up (`bridge.catch_up`) and to seed its best schedules (`bridge.draft_verify`). A record
whose trace no longer applies to its workload comes back as the error the replay raised, for the
caller to skip and report. The catch-up and the search replay every record of the task, one after
the other at the run's start; a `ReplayMemo` shared by the two hands the first's replays to the
second, so each record is replayed once.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

__all__ = ["ReplayMemo", "replay_records", "task_records"]


def task_records(database: Any, mod: Any) -> list:
    """The records `database` holds for the task `mod` (its workload), in the database's order; []
    when it has none (the workload is not committed then)."""
    if not database.has_workload(mod):
        return []
    workload = database.commit_workload(mod)
    return [r for r in database.get_all_tuning_records() if r.workload.same_as(workload)]


def replay_records(records: list, threads: int = 1) -> list:
    """Each database record's measure candidate (its trace replayed on its workload), or the exception
    the replay raised (a trace that no longer applies). The replay is TVM's, about 9 ms a record on
    the host, and releases the GIL: `threads` replay at once (1,448 records: 12.3-14.1 s on 1 thread,
    5.8-6.2 s on 2; docs/benchmarks.md, "A resumed run's start-up")."""

    def replay(record: Any) -> Any:
        try:
            return record.as_measure_candidate()
        except Exception as err:  # noqa: BLE001 - TVM raises its own errors for a trace that does not apply
            return err

    if threads <= 1 or len(records) < 2:
        return [replay(r) for r in records]
    with ThreadPoolExecutor(min(threads, len(records))) as pool:
        return list(pool.map(replay, records))


class ReplayMemo:
    """A run's replays of its tasks' records, kept by the first caller for the next, which takes them.

    `replay(records, threads, keep=True)` is `replay_records`, except that replays an earlier call
    kept for the same records are returned (and forgotten) instead of replaying again; with `keep` it
    keeps its own for the next call. Records are the same when they are the same database objects in
    the same order (`same_as`: a database hands out the records it holds), so a task whose records
    changed in between is replayed afresh. Thread-safe. `hits` counts the replays it saved."""

    def __init__(self):
        self._kept: list[tuple[list, list]] = []  # (records, their replays), a task each
        self._lock = threading.Lock()
        self.hits = 0

    def replay(self, records: list, threads: int = 1, *, keep: bool = True) -> list:
        records = list(records)
        with self._lock:
            for i, (kept, replayed) in enumerate(self._kept):
                if len(kept) == len(records) and all(a.same_as(b) for a, b in zip(kept, records)):
                    del self._kept[i]
                    self.hits += len(records)
                    return replayed
        replayed = replay_records(records, threads)
        if keep and records:
            with self._lock:
                self._kept.append((records, replayed))
        return replayed
