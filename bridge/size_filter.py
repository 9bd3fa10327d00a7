"""A round's picks kept under a CUDA source-size limit before they take batch slots.

The builder's guard (`--max-source-kb`) refuses a kernel only once its source exists, and the refused
pick has used a slot of its batch: on the H200 suite MoA lost up to 14% of a 3x3 conv run's trials
so (docs/benchmarks.md, "A 256 KB source guard"). `SizeFilter` estimates each pick's source before
the build (`bridge.build_size`, 5-25 ms a schedule) and passes over those estimated over the limit,
so the next one in rank order takes the slot. Each schedule is estimated once per task.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from bridge.build_size import estimated_source_kb

__all__ = ["SizeFilter", "check_limit"]

log = logging.getLogger(__name__)


def check_limit(limit_kb: float | None) -> None:
    """Raise ValueError unless `limit_kb` is a usable limit: > 0 KB, or None (no filter)."""
    if limit_kb is not None and not limit_kb > 0:
        raise ValueError(f"size_filter_kb={limit_kb!r} must be > 0 (None: off)")


class SizeFilter:
    """Keeps picks whose estimated CUDA source is at most `limit_kb` KB, in the order given.

    Attributes:
        dropped: picks passed over so far (a schedule counts once).
    """

    def __init__(self, limit_kb: float, target: Any):
        check_limit(limit_kb)
        self.limit_kb, self.target = float(limit_kb), target
        self._estimates: dict[int, float] = {}
        self.dropped = 0

    def estimate(self, key: int, sch: Any) -> float:
        """The schedule's estimated source KB (0 when it cannot be estimated: the builder decides)."""
        kb = self._estimates.get(key)
        if kb is None:
            try:
                kb = estimated_source_kb(sch.mod, self.target)
            except Exception:  # TVM raises several error types; a schedule we cannot lower builds or fails as before
                log.debug("estimating a pick's source failed", exc_info=True)
                kb = 0.0
            self._estimates[key] = kb
            if kb > self.limit_kb:
                self.dropped += 1
        return kb

    def first(self, pairs: Sequence[tuple[int, Any]], n: int) -> list[tuple[int, Any]]:
        """Up to `n` of the (key, schedule) `pairs`, in order, passing over those over the limit."""
        kept: list[tuple[int, Any]] = []
        for key, sch in pairs:
            if len(kept) >= n:
                break
            if self.estimate(key, sch) <= self.limit_kb:
                kept.append((key, sch))
        return kept
