"""The seconds a set of time spans covers, overlaps counted once (`SpanUnion`): how long a tuning run
was drafting, however many drafts ran at once (`SearchLog`'s `draft_wall_s`)."""

from __future__ import annotations

__all__ = ["SpanUnion"]


class SpanUnion:
    """Time spans added in any order, kept merged: `seconds` is the time at least one of them covers."""

    def __init__(self) -> None:
        self._spans: list[tuple[float, float]] = []  # disjoint, in order

    def add(self, start: float, end: float) -> None:
        """Add the span from `start` to `end` (an empty or reversed one adds nothing)."""
        if not end > start:
            return
        merged = []
        for s, e in sorted([*self._spans, (start, end)]):
            if merged and s <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], e))
            else:
                merged.append((s, e))
        self._spans = merged

    @property
    def seconds(self) -> float:
        return sum(e - s for s, e in self._spans)
