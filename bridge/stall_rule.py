"""When a task's search has stalled and is due a new draft: `StallRule`.

Pruner's search drafts a new potential space when a task's best latency has not improved in its
last `rounds` measured rounds (`redraft_stall`). On the H100 suite a re-draft often found
nothing better once a task's best had settled: the 240 s MoA arm of the 1x1 conv drafted 13 times,
and 11 of its 12 re-drafts were followed by no improvement before the next one; drafting took
42% of that arm (docs/benchmarks.md, "The verify gate on the GPU"). With `backoff`, a re-draft on a
stall that found nothing better doubles the rounds the next one waits for (3, 6, 12, ...), and an
improvement brings the wait back to `rounds`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["StallRule"]


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

    def due(self) -> bool:
        """Whether the task has stalled for its window (with backoff, after a fruitless re-draft on a
        stall, the window doubles first and the draft waits for it)."""
        if self.rounds == 0 or self.stalled < self.window:
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
