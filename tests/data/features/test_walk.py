"""The walk of a lowered program: golden access records of hand-written schedules, agreement with
MetaSchedule's PerStoreFeature, and the GEMM needle on CUDA and CPU schedules."""

import math

import numpy as np
import pytest
from tvm import te
from tvm.s_tir.meta_schedule.testing import te_workload

from data.features import ACCESS_COLUMNS, GEMM_NEEDLE, PSA_COLUMNS, featurize_candidates, walk_features
from data.features.lowering import lower_for_features, per_store_rows
from data.features.walk import walk_lowered
from tvm_env import tvm

A = {name: i for i, name in enumerate(ACCESS_COLUMNS)}
P = {name: i for i, name in enumerate(PSA_COLUMNS)}


def slog(x):
    return math.copysign(math.log2(abs(x) + 1), x)


def per_store_group2(features):
    """What PerStoreFeature's buffer-access slots (cols 57-146) should be, from our access records.

    PerStoreFeature keeps one row per buffer (its last non-constant store, rows in order of the first
    one) and sorts that store's buffers by (lines, bytes, name) descending into 5 slots of 18. Names
    can tie, so slots are compared as a sorted list of rows.
    """
    per_buffer = {}
    for store, accesses in features.per_store:
        if not store.constant:
            per_buffer[store.buffer] = accesses
    rows = []
    for accesses in per_buffer.values():
        slots = sorted(accesses, key=lambda a: a.sort_key)[:5]
        rows.append(sorted(tuple(np.float32(a.row)) for a in slots))
    return rows


def assert_matches_per_store(ctx, candidates, is_gpu):
    for cand, stmt in zip(candidates, per_store_rows(ctx, candidates)):
        ours = per_store_group2(walk_lowered(lower_for_features(cand.sch.mod), is_gpu))
        theirs = [sorted(tuple(s) for s in row[57:147].reshape(5, 18) if s.any()) for row in stmt]
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs):
            np.testing.assert_allclose(np.array(a), np.array(b), rtol=1e-5, atol=1e-4)


# --------------------------------------------------------------------------------------- CPU


def tiny_cpu_matmul(cache: bool = False):
    """32^3 matmul: loops (i, j0, k, j1:vectorized 8), accumulator init decomposed at k; with
    `cache`, the 8 accumulators of one (i, j0) live in a C_global buffer written back under j0."""
    sch = tvm.s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func(te_workload.matmul(32, 32, 32))}))
    block = sch.get_sblock("C")
    i, j, k = sch.get_loops(block)
    j0, j1 = sch.split(j, [4, 8])
    sch.reorder(i, j0, k, j1)
    sch.vectorize(j1)
    if cache:
        sch.reverse_compute_at(sch.cache_write(block, 0, "global"), j0)
    sch.decompose_reduction(block, k)
    return sch


def test_golden_slices_of_a_hand_written_cpu_matmul(cpu_target):
    f = walk_features(tiny_cpu_matmul().mod, is_gpu=False)
    # records: init (C write), update (A read, B read, C read-write); all function arguments in global
    assert f.scopes == "0000" and f.access.shape == (4, 23)
    np.testing.assert_array_equal(
        f.access[:, [A["read"], A["write"], A["read_write"]]], [[0, 1, 0], [1, 0, 0], [1, 0, 0], [0, 0, 1]]
    )
    np.testing.assert_array_equal(f.access[:, A["scope_global"]], 1)
    np.testing.assert_array_equal(f.access[:, A["alloc_bytes"]], 0)
    flops = 32 * 4 * 32 * 8 * 2  # loop product x (add + mul)
    np.testing.assert_allclose(f.access[:, A["flops"]], [0, slog(flops), slog(flops), slog(flops)], rtol=1e-6)
    a, b = f.access[1], f.access[2]
    assert a[A["bytes"]] == pytest.approx(slog(4 * 32**3))
    assert a[A["unique_bytes"]] == pytest.approx(slog(4 * 32 * 32))
    # A[i, k] is invariant in the innermost loop j1 (8): loop reuse, distance 1 iteration
    assert a[A["reuse_loop"]] == 1 and a[A["reuse_ct"]] == pytest.approx(slog(8))
    assert a[A["reuse_dis_iter"]] == pytest.approx(slog(1)) and a[A["reuse_dis_bytes"]] == pytest.approx(slog(12))
    # B[k, j0 * 8 + j1] moves with the innermost loop (stride 1); A does not (innermost stride 0)
    assert b[A["stride"]] == pytest.approx(slog(1)) and a[A["stride"]] == 0
    assert not f.gemm_found and not f.gemm.any() and f.gemm.shape == (8, 23)
    assert f.psa.shape == (1, 12)
    psa = f.psa[0]
    assert psa[P["flops_per_thread"]] == flops and psa[P["is_gpu"]] == 0 and psa[P["grid"]] == psa[P["block"]] == 1


def test_cached_buffer_allocation_and_scope(cpu_target):
    f = walk_features(tiny_cpu_matmul(cache=True).mod, is_gpu=False)
    # init (C_global), update (A, B, C_global rw), write-back (C_global read, C write)
    assert f.scopes == "000000"
    alloc = f.access[:, A["alloc_bytes"]]
    np.testing.assert_allclose(alloc, [slog(8 * 4), 0, 0, slog(8 * 4), slog(8 * 4), 0])  # compacted to 8 floats


def test_empty_program_gives_empty_arrays():
    mod = tvm.IRModule({"main": tvm.tirx.PrimFunc([], tvm.tirx.Evaluate(tvm.tirx.const(0, "int32")))})
    f = walk_features(mod, is_gpu=True)
    assert f.access.shape == (0, 23) and f.psa.shape == (0, 12) and f.scopes == "" and not f.gemm_found


def test_cpu_candidates_match_per_store_feature_and_have_no_gemm(cpu_target, sample, te_module):
    for mod in (
        te_module(te_workload.matmul(64, 64, 64)),
        te_module(te_workload.conv2d_nhwc(1, 8, 8, 16, 16, 3, 1, 1)),
    ):
        ctx, cands = sample(mod, cpu_target, 6)
        assert_matches_per_store(ctx, cands, is_gpu=False)
        feats = featurize_candidates(ctx, cands)
        assert all(f is not None and not f.gemm_found and set(f.scopes) <= {"0"} for f in feats)
        assert all(f.stmt.shape[1] == 164 and len(f.stmt) >= 1 for f in feats)


@pytest.mark.parametrize(
    "tensors",
    [te_workload.matmul(128, 128, 128), te_workload.conv2d_nhwc(1, 14, 14, 32, 32, 3, 1, 1)],
    ids=["matmul", "conv2d"],
)
def test_metaschedule_cuda_schedules_have_the_gemm_needle(cuda_target, tensors, sample, te_module):
    ctx, cands = sample(te_module(tensors), cuda_target, 4, seed=1)
    feats = featurize_candidates(ctx, cands)
    for f in feats:
        pos = f.scopes.find(GEMM_NEEDLE)
        assert f.gemm_found and pos >= 0
        np.testing.assert_array_equal(f.gemm, f.access[pos : pos + 8])
        assert (f.psa[:, P["is_gpu"]] == 1).all() and f.psa[:, P["block"]].max() > 1
    assert_matches_per_store(ctx, cands, is_gpu=True)
