"""The features of one scheduled program (`ProgramFeatures`) and the names of their columns.

Every featurization path (`data.features.featurize_candidates`, the shards written by
`data.featurize`, the cost models in bridge/) hands programs around as this one type.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from data.features.gemm import GEMM_NEEDLE, no_gemm
from data.schema import ACCESS_DIM, GEMM_ROWS, PSA_DIM

__all__ = ["ACCESS_COLUMNS", "CACHE_LINE_BYTES", "PSA_COLUMNS", "ProgramFeatures", "slog"]

ACCESS_COLUMNS = (
    "flops",
    "scope_global",
    "scope_shared",
    "scope_local",
    "read",
    "write",
    "read_write",
    "bytes",
    "unique_bytes",
    "lines",
    "unique_lines",
    "reuse_loop",
    "reuse_serial",
    "reuse_none",
    "reuse_dis_iter",
    "reuse_dis_bytes",
    "reuse_ct",
    "bytes_d_reuse_ct",
    "unique_bytes_d_reuse_ct",
    "lines_d_reuse_ct",
    "unique_lines_d_reuse_ct",
    "stride",
    "alloc_bytes",
)
"""Names of the 23 access-record columns (docs/pruner.md 1.1); counts are slog'ed, one-hots are 0/1."""
PSA_COLUMNS = (
    "flops_per_thread",
    "total_flops",
    "registers",
    "memory_work",
    "shared_footprint",
    "dram_traffic",
    "reuse",
    "is_gpu",
    "grid",
    "block",
    "vthread",
    "dram_traffic_all",
)
"""Names of the 12 PSA columns (docs/pruner.md 4.1: the published 11, then DRAM traffic over every
trip of the serial loops, which the `traffic` formulas of `bridge.psa` use), raw element counts."""
CACHE_LINE_BYTES = 64
"""PerStoreFeature's default cache line."""

assert len(ACCESS_COLUMNS) == ACCESS_DIM and len(PSA_COLUMNS) == PSA_DIM and len(GEMM_NEEDLE) == GEMM_ROWS


@dataclasses.dataclass
class ProgramFeatures:
    """Features of one scheduled program. Arrays are float32; a part that was not asked for is None.

    stmt: (n_stmt, 164) PerStoreFeature rows (one per stored buffer, constant stores skipped).
    access: (n_access, 23) per-access records in program order (ACCESS_COLUMNS).
    scopes: one digit per access record, '0' global, '1' shared, '2' local.
    gemm: (8, 23) the access records at the first GEMM_NEEDLE in `scopes`, zeros when absent.
    gemm_found: whether the needle was found.
    psa: (n_psa, 12) PSA rows, one per stored buffer in order of first store (PSA_COLUMNS).
    An empty program gives (0, F) arrays.
    """

    stmt: np.ndarray | None
    access: np.ndarray | None
    scopes: str | None
    gemm: np.ndarray | None
    gemm_found: bool
    psa: np.ndarray | None

    @classmethod
    def empty(cls, stmt: np.ndarray | None = None) -> ProgramFeatures:
        """A program with no access records, no GEMM (zeros) and no PSA rows, carrying `stmt`."""
        return cls(
            stmt, np.zeros((0, ACCESS_DIM), np.float32), "", no_gemm(), False, np.zeros((0, PSA_DIM), np.float32)
        )

    @property
    def gemm_matrix(self) -> np.ndarray:
        """(8, 23) `gemm`, or the zeros of a program without one when the walk was not asked for."""
        return self.gemm if self.gemm is not None else no_gemm()


def slog(x: float) -> float:
    """sign(x) * log2(|x| + 1), the compression of every count feature."""
    return math.copysign(math.log2(abs(x) + 1.0), x)
