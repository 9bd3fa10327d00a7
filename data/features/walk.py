"""One walk of a lowered program: access records, their scope digits, the GEMM matrix and the PSA rows."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from data.features.access import FLOAT_OPS_ALL, AccessWalker, collect_stores, store_accesses
from data.features.gemm import find_gemm
from data.features.graph import LOCAL, SHARED, Graph, count_ops
from data.features.lowering import lowered_json
from data.features.program import ProgramFeatures, slog
from data.features.psa_rows import psa_rows
from data.schema import ACCESS_DIM
from tvm_env import tvm

__all__ = ["Walked", "walk_features", "walk_lowered", "walk_modules"]


@dataclasses.dataclass
class Walked:
    """What `walk_lowered` finds (the parts of `ProgramFeatures` a walk computes)."""

    access: np.ndarray
    scopes: str
    gemm: np.ndarray
    gemm_found: bool
    psa: np.ndarray
    per_store: list  # (store, accesses) for tests and cross-checks against PerStoreFeature


def walk_lowered(lowered: tvm.IRModule | str, is_gpu: bool) -> Walked:
    """Walk a lowered module (or its `save_json` text)."""
    g = Graph(lowered if isinstance(lowered, str) else tvm.ir.save_json(lowered))
    stores, allocated = collect_stores(g)
    walker = AccessWalker(g)
    records: list[list[float]] = []
    digits: list[str] = []
    all_accesses = []
    for store in stores:
        accs = store_accesses(store)
        walker.store_features(store, accs)
        prod = 1
        for lp in store.loops:
            prod *= lp.extent or 1
        flops = slog(prod * count_ops(store.value, FLOAT_OPS_ALL))
        for acc in accs:
            _, _, nbytes, shape, scope = g.buffer(acc.buffer)
            alloc = slog(math.prod(shape) * nbytes) if acc.buffer in allocated else 0.0
            one_hot = [float(scope == 0), float(scope == SHARED), float(scope == LOCAL)]
            records.append([flops, *one_hot, *acc.row, alloc])
            digits.append(str(scope))
        all_accesses.append(accs)
    access = np.array(records, dtype=np.float32).reshape(-1, ACCESS_DIM)
    scopes = "".join(digits)
    gemm, found = find_gemm(access, scopes)
    psa = psa_rows(g, stores, all_accesses, is_gpu)
    return Walked(access, scopes, gemm, found, psa, list(zip(stores, all_accesses)))


def walk_features(mod: tvm.IRModule, *, is_gpu: bool, stmt: np.ndarray | None = None) -> ProgramFeatures:
    """Access records, GEMM matrix and PSA rows of a scheduled module (one lowering).

    Args:
        mod: the scheduled module (`sch.mod` of a replayed trace or a MeasureCandidate).
        is_gpu: the target is a GPU (PSA column 7).
        stmt: PerStoreFeature rows to carry along (see `per_store_rows`).

    Raises:
        tvm errors when the module does not lower.
    """
    w = walk_lowered(lowered_json(mod), is_gpu)
    return ProgramFeatures(stmt, w.access, w.scopes, w.gemm, w.gemm_found, w.psa)


def walk_modules(mods: Sequence[tvm.IRModule], is_gpu: bool, threads: int = 1) -> list[ProgramFeatures | Exception]:
    """`walk_features` of many scheduled modules: lowered on `threads` threads (C++), walked in this thread.

    A module that fails to lower or to walk gives the exception in its place (an unexpected IR shape
    scores as a failure, it never crashes tuning).
    """
    texts = _map_threads(_lowered_json_or_error, list(mods), threads)
    out: list[ProgramFeatures | Exception] = []
    for text in texts:
        if isinstance(text, Exception):
            out.append(text)
            continue
        try:
            w = walk_lowered(text, is_gpu)
        except Exception as err:
            out.append(err)
            continue
        out.append(ProgramFeatures(None, w.access, w.scopes, w.gemm, w.gemm_found, w.psa))
    return out


def _lowered_json_or_error(mod: tvm.IRModule) -> str | Exception:
    try:
        return lowered_json(mod)
    except Exception as err:
        return err


def _map_threads(fn, items: list, num_threads: int) -> list:
    """`fn` over `items` on up to `num_threads` threads (order kept)."""
    if num_threads <= 1 or len(items) <= 1:
        return [fn(x) for x in items]
    with concurrent.futures.ThreadPoolExecutor(min(num_threads, len(items))) as pool:
        return list(pool.map(fn, items))
