"""The one featurization entry point: parts on demand; "no GEMM" is zeros."""

import numpy as np
from tvm.s_tir.meta_schedule.testing import te_workload

from data.features import ProgramFeatures, featurize_candidates, no_gemm
from data.schema import ACCESS_DIM, GEMM_ROWS, PSA_DIM


def test_featurize_candidates_parts(cpu_target, sample, te_module):
    ctx, cands = sample(te_module(te_workload.matmul(64, 64, 64)), cpu_target, 2)
    full = featurize_candidates(ctx, cands)
    psa_only = featurize_candidates(ctx, cands, stmt=False)
    stmt_only = featurize_candidates(ctx, cands, walk=False)
    for f, p, s in zip(full, psa_only, stmt_only):
        assert p.stmt is None and s.access is None and s.psa is None
        np.testing.assert_array_equal(f.psa, p.psa)
        np.testing.assert_array_equal(f.access, p.access)
        np.testing.assert_array_equal(f.stmt, s.stmt)
        np.testing.assert_array_equal(s.gemm_matrix, no_gemm())  # walk not asked for: zeros
    assert featurize_candidates(ctx, []) == []


def test_empty_features_have_zero_gemm():
    f = ProgramFeatures.empty()
    assert f.access.shape == (0, ACCESS_DIM) and f.psa.shape == (0, PSA_DIM) and f.scopes == ""
    assert f.gemm.shape == (GEMM_ROWS, ACCESS_DIM) and not f.gemm.any() and not f.gemm_found
