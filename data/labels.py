"""The one label function: mean latency of a measurement and the per-task normalized throughput.

Used by the featurizer (training labels) and by the bridge's online updates, so a model sees the
same label definition offline and during tuning.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

FAILED_SECONDS = 1e10
"""What MetaSchedule stores as run_secs for a failed build or run."""


def mean_latency(run_secs: Iterable[float] | None) -> float:
    """Mean of `run_secs` in seconds; `inf` for a failed measurement (missing, empty, 1e10 or <= 0)."""
    if run_secs is None:
        return float("inf")
    secs = [float(s) for s in run_secs]
    if not secs or any(not np.isfinite(s) or s >= FAILED_SECONDS or s <= 0 for s in secs):
        return float("inf")
    return float(np.mean(secs))


def normalized_throughput(latencies: np.ndarray, best: float | None = None) -> np.ndarray:
    """Label = best latency / latency, in (0, 1]; failed (inf) records get 0.

    Args:
        latencies: (n,) seconds of the records of ONE task.
        best: the task's best latency; by default the best finite value of `latencies`.
    """
    latencies = np.asarray(latencies, dtype=np.float64)
    finite = np.isfinite(latencies)
    if best is None:
        if not finite.any():
            return np.zeros(latencies.shape, dtype=np.float32)
        best = float(latencies[finite].min())
    out = np.zeros(latencies.shape, dtype=np.float64)
    out[finite] = best / latencies[finite]
    return out.astype(np.float32)
