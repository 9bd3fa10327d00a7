"""When a task's search has stalled and is due a new draft: `StallRule`.

Pruner's search drafts a new potential space when a task's best latency has not improved in its
last `rounds` measured rounds (`redraft_stall`). On the H100 suite a re-draft often found
nothing better once a task's best had settled: the 240 s MoA arm of the 1x1 conv drafted 13 times,
and 11 of its 12 re-drafts were followed by no improvement before the next one; drafting took
42% of that arm (docs/benchmarks.md, "The verify gate on the GPU"). With `backoff`, a re-draft on a
stall that found nothing better doubles the rounds the next one waits for (3, 6, 12, ...), and an
improvement brings the wait back to `rounds`.

With `redraft_share`, a stall re-draft is also held while it would take the run's drafting over
that share of the run's time (`share_allows`, `DraftLedger`). With `search_ahead` 2 a round lasts
the longer of search and build, so a run has more rounds and, counted in rounds, more stalls: on the
GPU suite drafting rose to 24-48% of a run (docs/benchmarks.md, "Searching while the batch before
builds"), against the project's target of at most 15%. The first draft, and a draft needed because
the potential space cannot fill a batch, are never held. (A space that ran under `redraft_below`
but still fills one is drafted for as a stall is, under the share, with `low_draft_ahead`.)
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Sequence

__all__ = ["DraftLedger", "StallRule", "share_allows"]


class StallRule:
    """Counts a task's measured rounds without a new best, and says when a draft is due for it."""

    def __init__(self, rounds: int, *, backoff: bool = False, best: float = math.inf):
        """
        Args:
            rounds: a draft is due after this many measured rounds without a new best (0: never).
            backoff: double the wait after each re-draft on a stall that found nothing better.
            best: the task's best latency before this run (seconds; inf: none).
        """
        if rounds < 0:
            raise ValueError(f"redraft_stall={rounds!r} must be >= 0")
        self.rounds, self.backoff, self.best = rounds, backoff, best
        self.stalled = 0  # measured rounds since the best improved or the last draft
        self.window = rounds  # rounds the next draft on a stall waits for
        self._unproductive = False  # the last draft was due to a stall, and no better schedule came since

    def observe(self, latencies: Sequence[float]) -> None:
        """A measured round's latencies (seconds; failed runs: inf). No new best counts as a stall."""
        batch = min(latencies, default=math.inf)
        if batch < self.best:
            self.best, self.stalled, self.window, self._unproductive = batch, 0, self.rounds, False
        else:
            self.stalled += 1

    @property
    def window_full(self) -> bool:
        """Whether the task has stalled for its current window (without `due`'s backoff doubling)."""
        return self.rounds > 0 and self.stalled >= self.window

    def due(self) -> bool:
        """Whether the task has stalled for its window (with backoff, after a fruitless re-draft on a
        stall, the window doubles first and the draft waits for it)."""
        if not self.window_full:
            return False
        if self.backoff and self._unproductive:
            self.window *= 2
            self._unproductive = False
            return self.stalled >= self.window
        return True

    def drafted(self, *, on_stall: bool) -> None:
        """A draft was made (`on_stall`: because `due()` said so, not for another reason)."""
        self.stalled = 0
        self._unproductive = on_stall


def share_allows(drafted_s: float, elapsed_s: float, next_s: float, share: float | None) -> bool:
    """Whether a draft of about `next_s` seconds keeps the run's drafting within `share` of its time.

    Args:
        drafted_s: seconds the run's drafts took so far (every draft, the first and the ones the
            potential space ran low for included).
        elapsed_s: seconds the run has lasted so far.
        next_s: what the next draft is expected to take (the task's last draft).
        share: the most drafting may take of the run (None: no limit).
    """
    if share is None:
        return True
    return drafted_s + next_s <= share * (elapsed_s + next_s)


class DraftLedger:
    """The drafting seconds of one tuning run's tasks, and the run's clock: one ledger is shared by a
    search strategy and its clones (MetaSchedule clones the strategy for every task of a run).

    The clock starts when the first task begins tuning (`open`, from `pre_tuning`) and the account
    is cleared then; a strategy used again for another run starts afresh once every task of the
    last run ended (`close`, from `post_tuning`). Thread-safe.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open = 0
        self._start: float | None = None
        self.drafted_s = 0.0

    def open(self) -> None:
        with self._lock:
            if self._open == 0:
                self._start, self.drafted_s = time.perf_counter(), 0.0
            self._open += 1

    def close(self) -> None:
        with self._lock:
            self._open = max(0, self._open - 1)

    def note(self, seconds: float) -> None:
        """A draft's own seconds."""
        with self._lock:
            self.drafted_s += seconds

    def elapsed(self) -> float:
        """Seconds since the run's first task began tuning (0 before)."""
        return 0.0 if self._start is None else time.perf_counter() - self._start

    def allows(self, next_s: float, share: float | None) -> bool:
        """`share_allows` for a draft of `next_s` seconds now."""
        with self._lock:
            drafted = self.drafted_s
        return share_allows(drafted, self.elapsed(), next_s, share)
