"""The one featurization entry point: MetaSchedule candidates -> `ProgramFeatures`.

The featurizer of measured records (`data.featurize`), the cost models and PSA's draft (bridge/)
all call `featurize_candidates`; a `data.features.pool.WalkPool` only changes where the Python walk
runs (worker processes instead of this one), never what it computes.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import tvm_env
from data.features.lowering import per_store_rows
from data.features.program import ProgramFeatures
from data.features.walk import walk_modules
from tvm_env import ms

if TYPE_CHECKING:
    from data.features.pool import WalkPool

__all__ = ["featurize_candidates"]

log = logging.getLogger(__name__)


def featurize_candidates(
    context: ms.TuneContext,
    candidates: Sequence[ms.MeasureCandidate],
    *,
    stmt: bool = True,
    walk: bool = True,
    pool: WalkPool | None = None,
    on_error: Callable[[int, Exception], None] | None = None,
) -> list[ProgramFeatures | None]:
    """Features of MetaSchedule candidates, as the featurizer, the cost models and the PSA draft need them.

    Args:
        context: the task's TuneContext (its target decides is_gpu; `num_threads` threads run
            PerStoreFeature and our lowering, the Python walk runs in this thread or in `pool`).
        candidates: scheduled candidates (`c.sch.mod` is what the builder would compile).
        stmt: compute the PerStoreFeature rows (False for PSA-only drafting of many candidates).
        walk: compute access records, GEMM matrix and PSA rows.
        pool: worker processes for the walk of large batches (None: walk in this process).
        on_error: called with (candidate index, exception) for every candidate that failed.

    Returns:
        One ProgramFeatures per candidate (parts not asked for are None), or None where lowering or
        feature extraction failed.
    """
    candidates = list(candidates)
    out: list[ProgramFeatures | None] = [None] * len(candidates)
    rows = per_store_rows(context, candidates) if stmt else [None] * len(candidates)

    def fail(i: int, err: Exception) -> None:
        log.debug("featurizing candidate %d failed: %s", i, err)
        if on_error is not None:
            on_error(i, err)

    ok = []
    for i, r in enumerate(rows):
        if isinstance(r, Exception):
            fail(i, r)
        else:
            ok.append(i)
    if not walk:
        for i in ok:
            out[i] = ProgramFeatures(rows[i], None, None, None, False, None)
        return out
    is_gpu = tvm_env.is_gpu(context.target)
    threads = max(1, int(context.num_threads))
    mods = [candidates[i].sch.mod for i in ok]
    if pool is not None and pool.takes(len(mods)):
        walked = pool.walk(mods, is_gpu, threads)
    else:
        walked = walk_modules(mods, is_gpu, threads)
    for i, w in zip(ok, walked):
        if isinstance(w, Exception):
            fail(i, w)
        else:
            out[i] = dataclasses.replace(w, stmt=rows[i])
    return out
