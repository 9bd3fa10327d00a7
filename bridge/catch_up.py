"""Catch a resumed cost model up with its database: the measurements its saved state missed.

Our cost models write their state after their training on a batch, on the training thread
(`PrunerCostModel.save_later`), so a run killed with `kill -9` can leave a state one or two batches
behind the database, which keeps every measured record. A state also keeps the keys of the
schedules whose measurements it took (`PrunerCostModel.seen`). On resume, `catch_up` hands the
model, as one `update`, the task's records in the database that its state has not seen (all of them
when a kill came before the first state was written), so that the
resumed model has learned from every measurement of the run, each once. A state saved before the
keys were kept (`seen` None) is left as it is: which records it holds cannot be told.
"""

from __future__ import annotations

import logging
from typing import Any

from data.features import schedule_key
from data.replay import ReplayMemo, replay_records, task_records
from tvm_env import ms

__all__ = ["catch_up"]

logger = logging.getLogger(__name__)


def catch_up(model: Any, context: Any, database: Any, replays: ReplayMemo | None = None) -> int:
    """Update `model` on the records of `context`'s task in `database` that its state has not seen
    (`model.seen_in`); how many (0 for a model that keeps no such keys, or whose state predates them).
    A record whose trace no longer applies to the task is skipped with a warning naming it. With
    `replays` (the run's, shared with its search strategies), the replays are kept for the task's
    search, which would replay the same records next."""
    known = model.seen_in(context) if hasattr(model, "seen_in") else None
    if known is None or not database.has_workload(context.mod):
        return 0
    records = task_records(database, context.mod)
    threads = int(context.num_threads)
    replayed = replays.replay(records, threads) if replays is not None else replay_records(records, threads)
    candidates, results = [], []
    for record, candidate in zip(records, replayed):
        if isinstance(candidate, Exception):  # a trace that no longer applies: the database keeps it, the model cannot
            logger.warning("%s: cannot replay a measured record for the cost model: %s", context.task_name, candidate)
            continue
        key = schedule_key(candidate.sch.mod)
        if key in known:
            continue
        known.add(key)
        candidates.append(candidate)
        results.append(ms.runner.RunnerResult(record.run_secs, None))
    if candidates:
        model.update(context, candidates, results)
        logger.info("%s: the cost model caught up on %d records its state missed", context.task_name, len(candidates))
    return len(candidates)
