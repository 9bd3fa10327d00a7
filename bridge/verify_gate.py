"""Which ranking to trust for a task: the verifier's or the draft's, judged on the run's own batches.

A verifier only helps if it ranks the potential space better than the draft model that filled it.
A pretrained verifier can rank a new operator's tuned schedules worse than PSA does (the suite's
measured schedules: the pretrained PAM 0.639 pairwise against PSA's 0.691; docs/benchmarks.md,
"Why MoA trails Pruner"). `VerifyGate` scores each measured batch with both models before the
verifier learns from it (a prequential test: no model is judged on what it was trained on), counts
the pairs of the batch each orders as their latencies do, and says to rank by the draft while the
draft has been right more often. Older batches count less (`decay` per batch), so a verifier that
adapts takes over once it is better.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ["VerifyGate", "concordant_pairs"]


def concordant_pairs(scores: Sequence[float], latencies: Sequence[float]) -> tuple[float, int]:
    """(pairs `scores` orders as `latencies` do (higher score = lower latency), pairs compared):
    pairs of finite, different latencies; a tie in score counts as half right."""
    s, lat = np.asarray(scores, dtype=np.float64), np.asarray(latencies, dtype=np.float64)
    ok = np.isfinite(lat)
    s, lat = s[ok], lat[ok]
    i, j = np.triu_indices(len(lat), k=1)
    keep = lat[i] != lat[j]
    i, j = i[keep], j[keep]
    faster_first = lat[i] < lat[j]
    agree = np.where(faster_first, s[i] > s[j], s[j] > s[i]) + 0.5 * (s[i] == s[j])
    return float(agree.sum()), len(i)


class VerifyGate:
    """Running, decayed pairwise accuracy of the verifier and of the draft model on measured batches.

    Attributes:
        verifier_acc, draft_acc: the accuracies so far (nan before any pair).
    """

    def __init__(self, *, min_pairs: int = 60, decay: float = 0.7):
        """
        Args:
            min_pairs: decayed pairs to see before the draft may be preferred (a batch of 16 holds
                120, of 8 28: three batches).
            decay: weight of the earlier batches at each new batch (1: all count alike).
        """
        if min_pairs < 1 or not 0.0 < decay <= 1.0:
            raise ValueError(f"min_pairs={min_pairs!r} must be >= 1 and decay={decay!r} in (0, 1]")
        self.min_pairs, self.decay = min_pairs, decay
        self._right = {"verifier": 0.0, "draft": 0.0}
        self._pairs = 0.0

    def observe(
        self, verifier_scores: Sequence[float], draft_scores: Sequence[float], latencies: Sequence[float]
    ) -> tuple[float, float, int]:
        """Count one measured batch (scored by both models before the verifier learned from it);
        returns the batch's (pairs the verifier ordered right, the draft did, pairs compared)."""
        v, n = concordant_pairs(verifier_scores, latencies)
        d, _ = concordant_pairs(draft_scores, latencies)
        self._right = {
            "verifier": self.decay * self._right["verifier"] + v,
            "draft": self.decay * self._right["draft"] + d,
        }
        self._pairs = self.decay * self._pairs + n
        return v, d, n

    @property
    def verifier_acc(self) -> float:
        return self._right["verifier"] / self._pairs if self._pairs else math.nan

    @property
    def draft_acc(self) -> float:
        return self._right["draft"] / self._pairs if self._pairs else math.nan

    def use_draft(self) -> bool:
        """Rank by the draft model: enough pairs seen, and the draft ordered more of them right."""
        return self._pairs >= self.min_pairs and self._right["draft"] > self._right["verifier"]
