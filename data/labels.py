"""The one label function: mean latency of a measurement and the per-task normalized throughput.

Used by the featurizer (training labels) and by the bridge's online updates, so a model sees the
same label definition offline and during tuning.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

FAILED_SECONDS = 1e10
"""What MetaSchedule stores as run_secs for a failed build or run."""
MIN_PLAUSIBLE_SECONDS = 1e-9
"""Below the resolution of any timer MetaSchedule measures with (one nanosecond): a run_secs value
under it (or NaN, inf, <= 0) was not measured; taken as a task's best it would push every other
label of the task to about 0."""


def latency_problem(run_secs: Iterable[float] | None) -> str | None:
    """Why `run_secs` gives no latency, or None when it does.

    Returns:
        "failed" for a failed build or run (missing, empty, or MetaSchedule's 1e10), or
        "implausible: <value>" for a value no timer measured (NaN, inf, <= 0 or below 1 ns).
    """
    if run_secs is None:
        return "failed"
    secs = [float(s) for s in run_secs]
    if not secs or any(s >= FAILED_SECONDS for s in secs):
        return "failed"
    bad = next((s for s in secs if not np.isfinite(s) or s < MIN_PLAUSIBLE_SECONDS), None)
    if bad is not None:
        return (
            f"implausible: run_secs value {bad!r} (not a measured time: below {MIN_PLAUSIBLE_SECONDS} s or not finite)"
        )
    return None


def mean_latency(run_secs: Iterable[float] | None) -> float:
    """Mean of `run_secs` in seconds; `inf` when there is none (`latency_problem`: failed or implausible).

    `run_secs` may be any iterable of numbers, e.g. a TuningRecord's or RunnerResult's FloatImm array.
    """
    if run_secs is None:
        return float("inf")
    secs = [float(s) for s in run_secs]
    return float("inf") if latency_problem(secs) is not None else float(np.mean(secs))


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
