"""What the features see: the PerStoreFeature pass list, and MetaSchedule's own PerStoreFeature rows.

`lower_for_features` is MetaSchedule's PassListForPerStoreFeature minus its internal unit-loop pass
(Python cannot call it; the walk emulates it, see `data.features.graph`). `per_store_rows` runs
MetaSchedule's PerStoreFeature (C++, parallel over the context's threads): the 164-wide statement
rows are never re-implemented in Python.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from data.schema import STMT_DIM
from tvm_env import ms, tvm

__all__ = ["lower_for_features", "lowered_json", "per_store_rows"]

log = logging.getLogger(__name__)

_ST, _TT = tvm.s_tir.transform, tvm.tirx.transform
_LOWER = tvm.transform.Sequential(
    [
        _ST.RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True),
        _ST.LowerCrossThreadReduction(),
        _ST.LowerInitBlock(),
        _ST.PlanAndUpdateBufferAllocationLocation(),
        _ST.ConvertBlocksToOpaque(),
        _ST.CompactBufferAllocation(),
        _TT.StmtSimplify(),
        _ST.LowerAutoCopy(),
        _ST.UnifyThreadBinding(),
        _ST.LowerMatchBuffer(),
        _TT.StmtSimplify(),
    ]
)

_PER_STORE = ms.feature_extractor.PerStoreFeature()
assert _PER_STORE.feature_vector_length == STMT_DIM


def lower_for_features(mod: tvm.IRModule) -> tvm.IRModule:
    """The scheduled module as PerStoreFeature sees it (init blocks lowered, allocations compacted)."""
    return _LOWER(mod)


def lowered_json(mod: tvm.IRModule) -> str:
    """Lower and serialize (C++ only: the FFI releases the GIL, so threads run this in parallel)."""
    return tvm.ir.save_json(lower_for_features(mod))


def per_store_rows(context: ms.TuneContext, candidates: Sequence[ms.MeasureCandidate]) -> list[np.ndarray | Exception]:
    """PerStoreFeature rows, (n_stmt, 164) float32 per candidate (C++, `context.num_threads` threads).

    A batch that fails is retried one candidate at a time; a candidate that fails alone gives the
    exception it raised in its place.
    """
    if not candidates:
        return []
    try:
        return [f.numpy().astype(np.float32) for f in _PER_STORE.extract_from(context, list(candidates))]
    except Exception as err:  # TVM raises several error types; isolate the bad candidate
        if len(candidates) == 1:
            log.debug("PerStoreFeature failed", exc_info=True)
            return [err]
    return [rows for cand in candidates for rows in per_store_rows(context, [cand])]
