"""The GEMM pattern: the access records of a canonical GPU matrix multiply (PAM's second input).

A program's access records carry one scope digit each ('0' global, '1' shared, '2' local); the
canonical GPU GEMM reads as the needle '20101112': the local accumulator's init, A.shared <- A,
B.shared <- B, and the update C.local += A.shared * B.shared. The GEMM matrix is the 8 records at the
first occurrence of the needle, and zeros (the one definition of "missing GEMM") when there is none.
"""

from __future__ import annotations

import numpy as np

from data.schema import ACCESS_DIM, GEMM_ROWS

__all__ = ["GEMM_NEEDLE", "find_gemm", "no_gemm"]

GEMM_NEEDLE = "20101112"
"""Scope digits of the canonical GPU GEMM: local init, A.shared <- A, B.shared <- B, update."""


def no_gemm() -> np.ndarray:
    """The GEMM matrix of a program without the pattern: (8, 23) float32 zeros."""
    return np.zeros((GEMM_ROWS, ACCESS_DIM), np.float32)


def find_gemm(access: np.ndarray, scopes: str) -> tuple[np.ndarray, bool]:
    """(the (8, 23) records at the first GEMM_NEEDLE in `scopes`, or zeros; whether it was found).

    Args:
        access: (n, 23) access records of a program.
        scopes: their n scope digits.
    """
    pos = scopes.find(GEMM_NEEDLE)
    if pos < 0:
        return no_gemm(), False
    return access[pos : pos + GEMM_ROWS].copy(), True
