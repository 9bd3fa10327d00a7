"""Where a tuning run's time went, read from its curve rows (`bridge.search_log.SearchLog.rows`, or a
saved curve read back with `bridge.search_log.read_rounds`).

- `device_idle_share`: the share of the run's wall-clock time in which no batch ran on the device;
  `device_idle_parts`: where that time fell (before the first batch, on drafts, the rest);
- `drafting_share`: the share spent drafting (draft seconds over the wall: drafts at once each count);
- `drafting_wall_share`: the share of the wall during which a draft ran (drafts at once count once);
- `build_per_round`: the median seconds a batch took to build; `build_busy`: how busy a batch kept
  the build workers; `deferred_picks`: the picks a batch left building for the next one;
  `refused_picks`: the picks the builder's source guard refused (`--max-source-kb`);
- `build_bound_idle`: the idle share that the builds alone impose on the rounds after the first.
- `idle_between_batches`: the idle share from the first batch's start on (the issue's measure).
- `column_total`: a logged column's sum (e.g. `update_s`, `learn_s`); `per_trial`: that sum per trial
  of the rows that logged it (e.g. the runner's seconds a trial, `run_s`).
- `host_cpu_busy`: the share of the host's cores that the run (this process and its workers) kept
  busy (`bridge.host_cpu`).
- `first_rounds_done`: when every task of a run of several had its first round's results taken up
  (a network's later rounds come after it).

Each takes the rows as a run writes them; a column a run did not fill (NaN, or absent in an older
curve) counts as missing.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "build_bound_idle",
    "build_busy",
    "build_per_round",
    "column_total",
    "deferred_picks",
    "device_idle_parts",
    "device_idle_share",
    "drafting_share",
    "drafting_wall_share",
    "first_rounds_done",
    "host_cpu_busy",
    "per_trial",
    "idle_between_batches",
    "refused_picks",
]


def _finite(row: Mapping[str, Any], key: str) -> float | None:
    """A curve row's `key` as a float, or None where it is missing or not finite (NaN: not logged)."""
    value = float(row.get(key, math.nan))
    return value if math.isfinite(value) else None


def column_total(rows: Sequence[Mapping[str, Any]], key: str) -> float:
    """A column's sum over the rows that logged it; NaN when none did (e.g. a curve from before it)."""
    values = [value for r in rows if (value := _finite(r, key)) is not None]
    return float(sum(values)) if values else math.nan


def per_trial(rows: Sequence[Mapping[str, Any]], key: str) -> float:
    """A column's sum over the rows that logged it, per trial of those rows (a resumed run's records
    from before its curve are not in the count); NaN when no row logged it."""
    logged = [r for r in rows if _finite(r, key) is not None]
    trials = sum(float(r["trials"]) for r in logged)
    return column_total(logged, key) / trials if trials else math.nan


def _busy(rows: Sequence[Mapping[str, Any]]) -> float:
    """Seconds the device ran batches in a run: the sum of its rounds' `run_s`."""
    return sum(value for r in rows if (value := _finite(r, "run_s")) is not None)


def device_idle_share(rows: Sequence[Mapping[str, Any]]) -> float:
    """Share of the run's wall-clock time in which no batch was running (1 - sum of run_s / elapsed).

    `run_s` of a row is the time its batch spent in the runner (launch and waiting for the results);
    `elapsed_s` is cumulative from the start of the run, so the last row's is its wall-clock time.
    NaN without rows.
    """
    if not rows:
        return math.nan
    wall = float(rows[-1]["elapsed_s"])
    return max(0.0, 1.0 - _busy(rows) / wall) if wall > 0 else math.nan


def idle_between_batches(rows: Sequence[Mapping[str, Any]]) -> float:
    """Share of the wall-clock time from the first batch's start on in which no batch was running:
    the idle time between batches (issue 12's measure), without the first search and build before
    anything runs (`device_idle_parts`' `before_first`). NaN without rows or time after that start."""
    if not rows:
        return math.nan
    wall = float(rows[-1]["elapsed_s"])
    starts = _run_starts(rows)
    start = min(starts.values()) if starts else float(rows[0]["elapsed_s"]) - (_finite(rows[0], "run_s") or 0.0)
    return max(0.0, 1.0 - _busy(rows) / (wall - start)) if wall > start else math.nan


def _run_starts(rows: Sequence[Mapping[str, Any]]) -> dict[int, float] | None:
    """Row index -> `run_start_s` of the rows whose batch ran (a `run_s` over 0; a batch whose picks
    all failed to build never reaches the runner), or None when one of them lacks it (a curve from
    before the column) or none ran. A row is written when the task scheduler takes its batch's
    results up, which for a network's tasks comes long after the batch ran: MetaSchedule hands every
    task a batch in turn before it takes any results up, so the rows' `elapsed_s` do not place the
    runs, and their starts do. (With an RPC runner a batch's `run_s` is the wait for its results
    when they are taken up, so the runs are placed only roughly.)"""
    ran = [i for i, row in enumerate(rows) if (_finite(row, "run_s") or 0.0) > 0]
    starts = {i: _finite(rows[i], "run_start_s") for i in ran}
    return None if not starts or any(s is None for s in starts.values()) else starts


def device_idle_parts(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Where the device's idle time fell, each as a share of the run's wall-clock time.

    A round's idle time is its wall-clock time (the `elapsed_s` step) less its `run_s`. It counts as:
    - `before_first`: the first round's (the first search and build, before anything runs);
    - `drafts`: a round that waited on a draft. With pipelining (`prebuild_s` set) that is the round
      before the drafted batch, since the draft ran while that round ran and its end waited for the
      draft; without pipelining it is the drafted batch's own round;
    - `other`: every other round's (search and build that outlast the run, model updates).

    With `run_start_s` in every row whose batch ran (`run_s` over 0), the idle time is the gaps between the runs placed by their
    starts, each charged to the batch after it, and the time after the last run counts as `other`;
    a curve without it (an earlier version's) places each run just before its row's `elapsed_s`.
    Their sum is `device_idle_share` for a run whose batches never run at once. Every value is NaN
    without rows.
    """
    parts = {"before_first": 0.0, "drafts": 0.0, "other": 0.0}
    if not rows or not float(rows[-1]["elapsed_s"]) > 0:
        return dict.fromkeys(parts, math.nan)

    def waits_on_draft(i: int, after: int | None) -> bool:
        """Whether row i's wait was a draft's: its own (searched in turn), or, pipelined, the draft of
        the batch after it (`after`: the next row in run order; None: the last)."""
        if _finite(rows[i], "prebuild_s") is None and _finite(rows[i], "drafted"):
            return True  # searched in turn: the round drafted before it built
        return bool(
            after is not None and _finite(rows[after], "prebuild_s") is not None and _finite(rows[after], "drafted")
        )

    wall = float(rows[-1]["elapsed_s"])
    starts = _run_starts(rows)
    if starts is not None:  # the gaps between the runs, each charged to the batch that waited in it
        order = sorted(starts, key=starts.__getitem__)
        end = 0.0
        for rank, i in enumerate(order):
            after = order[rank + 1] if rank + 1 < len(order) else None
            part = "before_first" if rank == 0 else "drafts" if waits_on_draft(i, after) else "other"
            parts[part] += max(0.0, starts[i] - end)
            end = max(end, starts[i] + float(rows[i]["run_s"]))
        parts["other"] += max(0.0, wall - end)  # after the last run: the last rows' updates
        return {k: v / wall for k, v in parts.items()}
    before = 0.0
    for i, row in enumerate(rows):
        elapsed = float(row["elapsed_s"])
        idle = max(0.0, elapsed - before - (_finite(row, "run_s") or 0.0))
        before = elapsed
        after = i + 1 if i + 1 < len(rows) else None
        parts["before_first" if i == 0 else "drafts" if waits_on_draft(i, after) else "other"] += idle
    return {k: v / wall for k, v in parts.items()}


def _build_wall(row: Mapping[str, Any]) -> float | None:
    """Seconds a round's batch took to build: `prebuild_s` where the pipeline built it ahead, else
    `build_s`; None without either."""
    value = _finite(row, "prebuild_s")
    return _finite(row, "build_s") if value is None else value


def build_per_round(rows: Sequence[Mapping[str, Any]]) -> float:
    """Median seconds a round's batch took to build: `prebuild_s` where the pipeline built it ahead,
    else `build_s`; NaN without any."""
    secs = [value for r in rows if (value := _build_wall(r)) is not None]
    return float(statistics.median(secs)) if secs else math.nan


def build_bound_idle(rows: Sequence[Mapping[str, Any]]) -> float:
    """The device's idle share that its builds alone impose, over the rounds after the first: 1 - sum
    of `run_s` / sum of each round's shortest possible length. A batch cannot run before it is built:
    built ahead (`prebuild_s`, while the batch before ran) a round lasts at least the longer of its
    build and its run; built in the loop (`build_s`), at least the two together. However fast the
    search and the model updates, the device idles this share; the rest of `device_idle_share`'s
    steady part is theirs. NaN without such rounds."""
    run_total = floor = 0.0
    for row in rows[1:]:
        run, built_ahead = _finite(row, "run_s"), _finite(row, "prebuild_s")
        build = built_ahead if built_ahead is not None else _finite(row, "build_s")
        if run is None or build is None:
            continue
        run_total += run
        floor += max(run, build) if built_ahead is not None else run + build
    return max(0.0, 1.0 - run_total / floor) if floor > 0 else math.nan


def build_busy(rows: Sequence[Mapping[str, Any]], workers: int) -> float:
    """Median over a run's batches of the share of `workers` x the batch's build time (`prebuild_s`,
    else `build_s`) that the build workers were busy (`build_work_s`); NaN without those columns.
    Well under 1: a batch waited on its last few builds (`SearchConfig.straggler_grace`)."""
    shares = []
    for r in rows:
        work, wall = _finite(r, "build_work_s"), _build_wall(r)
        if work is not None and wall and workers > 0:
            shares.append(work / (workers * wall))
    return float(statistics.median(shares)) if shares else math.nan


def _column_total(rows: Sequence[Mapping[str, Any]], key: str) -> int:
    """The sum of a count column over the run (rows that lack it count as 0)."""
    return int(sum(value for r in rows if (value := _finite(r, key)) is not None))


def deferred_picks(rows: Sequence[Mapping[str, Any]]) -> int:
    """Picks whose build a batch left running for the next batch (`deferred`), over the run."""
    return _column_total(rows, "deferred")


def refused_picks(rows: Sequence[Mapping[str, Any]]) -> int:
    """Picks the builder refused over its source guard (`refused`, `--max-source-kb`), over the run: they
    failed without compiling and took their batch's slot. Many of them say the cost model favours
    kernels too large to build quickly (docs/benchmarks.md, "A 256 KB source guard")."""
    return _column_total(rows, "refused")


def drafting_share(rows: Sequence[Mapping[str, Any]]) -> float:
    """The run's draft seconds over its wall-clock time (sum of `draft_s` / elapsed), whether the
    loop waited for a draft or it ran in the background; drafts that ran at once each count, so a
    network's first drafts can take it over 1 (`drafting_wall_share` counts them once). NaN without
    rows or for a search that does not draft (MetaSchedule's evolution logs no `draft_s`)."""
    drafts = [value for r in rows if (value := _finite(r, "draft_s")) is not None]
    if not rows or not drafts:
        return math.nan
    wall = float(rows[-1]["elapsed_s"])
    return sum(drafts) / wall if wall > 0 else math.nan


def drafting_wall_share(rows: Sequence[Mapping[str, Any]]) -> float:
    """Share of the run's wall-clock time during which at least one draft ran (the last row's
    `draft_wall_s`, which the log keeps as the union of the drafts' spans, over elapsed). Unlike
    `drafting_share` it counts drafts that ran at once (a network's first drafts) once, so it is at
    most 1. NaN without rows, for a search that does not draft, or for a curve from before the column
    (a resumed run's too)."""
    if not rows or all(_finite(r, "draft_s") is None for r in rows):
        return math.nan
    wall, covered = float(rows[-1]["elapsed_s"]), _finite(rows[-1], "draft_wall_s")
    return covered / wall if covered is not None and wall > 0 else math.nan


def host_cpu_busy(rows: Sequence[Mapping[str, Any]]) -> float:
    """Share of the host's cores the run kept busy: the rows' `host_cpu_s` over their wall seconds
    (each row's `elapsed_s` less the row's before) times `host_cores`, over the rows that logged
    both; NaN when none did (a curve from before them, or a host without /proc)."""
    cpu = wall = 0.0
    before = 0.0
    for r in rows:
        elapsed = _finite(r, "elapsed_s")
        spent, cores = _finite(r, "host_cpu_s"), _finite(r, "host_cores")
        if elapsed is not None and spent is not None and cores:
            cpu, wall = cpu + spent, wall + (elapsed - before) * cores
        before = elapsed if elapsed is not None else before
    return cpu / wall if wall > 0 else math.nan


def first_rounds_done(rows: Sequence[Mapping[str, Any]], tasks: int) -> float:
    """Seconds into the run (`elapsed_s`) when the last of `tasks` tasks had its first round's results
    taken up. MetaSchedule's task scheduler gives every task a round before any gets a second, so on a
    network this is where the tasks' later rounds begin. NaN when fewer than `tasks` tasks had a round
    (a run that never reached some) or without rows."""
    first: dict[str, float] = {}
    for r in rows:
        if _finite(r, "round") == 1 and (elapsed := _finite(r, "elapsed_s")) is not None:
            first.setdefault(str(r["task"]), elapsed)
    return max(first.values()) if first and len(first) >= tasks else math.nan
