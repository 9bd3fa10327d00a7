"""A learned model's scores blended with PSA's analytic ones, within each task.

Both score sets are standardized within a task (mean 0, standard deviation 1 over the task's
programs; PSA's after a log, since its scores are inverse estimated times spanning decades), then
summed with PSA's weighted: `z(model) + weight * z(log psa)`. Only the order within a task matters
to a ranking, so standardizing puts the two on one scale without fitting anything.

Why: on networks the learned models never saw, PAM and PSA err on different programs. On the three
H100 hold-outs at 26k records, the blend with weight 1 kept PAM's pairwise accuracy (0.892 / 0.903 /
0.887 against 0.893 each) and raised peak@1 from 0.827 / 0.882 / 0.888 to 0.878 / 0.916 / 0.984
(docs/benchmarks.md, "Model quality"). The weight was chosen leaving each hold-out out: on the
other two, 1.0 scored best of 0, 0.15, 0.3, 0.5, 0.75 and 1.0 (the largest tried) every time.

Programs PSA could not score (a failed lowering) get the task's lowest PSA value, and programs that
estimate no work at all the highest, as `bridge.psa.PSACostModel` ranks them. A task whose scores
are all equal contributes zeros from that side, so a cold (untrained) model leaves the ranking to
PSA.
"""

from __future__ import annotations

import math

import numpy as np


def check_weight(weight: float, what: str) -> None:
    """Refuse a blend weight that is negative or not finite; `what` names it in the message (e.g.
    "psa_weight=-1.0", or a CLI flag and its value).

    Raises:
        ValueError: "<what> must be finite and >= 0".
    """
    if not (math.isfinite(weight) and weight >= 0):
        raise ValueError(f"{what} must be finite and >= 0")


def standardize(scores: np.ndarray, groups: np.ndarray | None = None) -> np.ndarray:
    """`scores` standardized within each group (float64; zeros where a group's scores are all equal).

    Args:
        scores: (n,) finite scores.
        groups: (n,) group ids (e.g. task ids); None: one group.
    """
    scores = np.asarray(scores, dtype=np.float64)
    if groups is None:
        groups = np.zeros(len(scores), dtype=np.int64)
    if scores.shape != np.shape(groups):
        raise ValueError(f"scores {scores.shape} and groups {np.shape(groups)} differ in shape")
    if not np.isfinite(scores).all():
        raise ValueError("scores must be finite to standardize")
    _, inverse, counts = np.unique(groups, return_inverse=True, return_counts=True)
    mean = np.bincount(inverse, weights=scores) / counts
    centered = scores - mean[inverse]
    std = np.sqrt(np.bincount(inverse, weights=centered**2) / counts)
    out = np.zeros_like(scores)
    spread = std[inverse] > 1e-12 * np.maximum(1.0, np.abs(mean[inverse]))
    out[spread] = centered[spread] / std[inverse][spread]
    return out


def log_psa(psa: np.ndarray, groups: np.ndarray | None = None) -> np.ndarray:
    """log of PSA scores. As `bridge.psa.PSACostModel` ranks them: a program that estimates no work
    (+inf) gets its group's highest log + log 2, an unscored one (<= 0, -inf or nan: a failed
    lowering) its group's lowest."""
    psa = np.asarray(psa, dtype=np.float64)
    if groups is None:
        groups = np.zeros(len(psa), dtype=np.int64)
    ok = np.isfinite(psa) & (psa > 0)
    out = np.zeros(len(psa))
    out[ok] = np.log(psa[ok])
    for g in np.unique(groups[~ok]):
        member = groups == g
        scored = out[member & ok]
        low, high = (scored.min(), scored.max() + np.log(2.0)) if scored.size else (0.0, 0.0)
        out[member & ~ok] = np.where(np.isposinf(psa[member & ~ok]), high, low)
    return out


def blend_with_psa(
    scores: np.ndarray, psa: np.ndarray, groups: np.ndarray | None = None, weight: float = 1.0
) -> np.ndarray:
    """`z(scores) + weight * z(log psa)` within each group; higher = predicted faster.

    Args:
        scores: (n,) the learned model's scores (higher = faster).
        psa: (n,) PSA scores (`bridge.psa.psa_scores`: inverse estimated times, higher = faster).
        groups: (n,) task ids; None: all one task (a tuning round's candidates).
        weight: PSA's weight (0: the model's own order).
    """
    check_weight(weight, f"weight={weight!r}")
    return standardize(scores, groups) + weight * standardize(log_psa(psa, groups), groups)
