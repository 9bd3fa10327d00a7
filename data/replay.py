"""Tuning-database records replayed into schedules: each record's trace applied to its workload.

A resumed run replays its task's records to know what it measured (`bridge.search`), to catch its
cost model up (`bridge.catch_up`) and to seed its best schedules (`bridge.draft_verify`). A record
whose trace no longer applies to its workload comes back as the error the replay raised, for the
caller to skip and report.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

__all__ = ["replay_records"]


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
