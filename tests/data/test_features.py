"""Per-program features: golden slices of hand-written schedules, agreement with MetaSchedule's
PerStoreFeature, the GEMM needle on CUDA and CPU schedules, PSA rows, workload tags.

The CUDA part needs the CUDA tensor intrinsics (tvm_env.setup, ~20 s once): it lives in this
module only, behind a module-scoped fixture.
"""

import math

import numpy as np
import pytest
from tvm import te
from tvm.s_tir.meta_schedule.testing import te_workload

import tvm_env
from data.features import (
    ACCESS_COLUMNS,
    GEMM_NEEDLE,
    PSA_COLUMNS,
    featurize_candidates,
    walk_features,
    workload_tags,
)
from data.schema import TAG_NAMES
from tvm_env import ms, tvm, tvm_ffi

CPU = {"kind": "llvm", "mcpu": "native", "num-cores": 2}
A = {name: i for i, name in enumerate(ACCESS_COLUMNS)}
P = {name: i for i, name in enumerate(PSA_COLUMNS)}


def slog(x):
    return math.copysign(math.log2(abs(x) + 1), x)


def te_module(tensors):
    return tvm.IRModule({"main": te.create_prim_func(tensors)})


def candidate(sch):
    return ms.MeasureCandidate(sch, ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True))


def sample(mod, target, n, seed=0):
    """n MetaSchedule candidates of `mod` (design space + random decisions, post-processed)."""
    strategy = ms.search_strategy.EvolutionarySearch(init_measured_ratio=0.0, population_size=n)
    ctx = ms.TuneContext(
        mod=mod,
        target=target,
        space_generator="post-order-apply",
        search_strategy=strategy,
        task_name="t",
        num_threads=1,
        rand_state=seed,
    )
    ctx.pre_tuning(
        max_trials=n,
        num_trials_per_iter=n,
        design_spaces=ctx.generate_design_space(),
        database=ms.database.MemoryDatabase(),
        cost_model=ms.cost_model.RandomModel(),
    )
    sample_init = tvm_ffi.get_global_func("s_tir.meta_schedule.SearchStrategyEvolutionarySearchSampleInitPopulation")
    return ctx, [candidate(s) for s in list(sample_init(strategy, n))[:n]]


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
    from data.features import _walk_lowered, lower_for_features, per_store_rows

    for cand, stmt in zip(candidates, per_store_rows(ctx, candidates)):
        ours = per_store_group2(_walk_lowered(lower_for_features(cand.sch.mod), is_gpu))
        theirs = [sorted(tuple(s) for s in row[57:147].reshape(5, 18) if s.any()) for row in stmt]
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs):
            np.testing.assert_allclose(np.array(a), np.array(b), rtol=1e-5, atol=1e-4)


# --------------------------------------------------------------------------------------- CPU


@pytest.fixture(scope="module")
def cpu_target():
    target = tvm_env.parse_target(CPU)
    tvm_env.setup(target)
    return target


def tiny_cpu_matmul(cache: bool = False):
    """32^3 matmul: loops (i, j0, k, j1:vectorized 8), accumulator init decomposed at k; with
    `cache`, the 8 accumulators of one (i, j0) live in a C_global buffer written back under j0."""
    sch = tvm.s_tir.Schedule(te_module(te_workload.matmul(32, 32, 32)))
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
    assert f.psa.shape == (1, 11)
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
    assert f.access.shape == (0, 23) and f.psa.shape == (0, 11) and f.scopes == "" and not f.gemm_found


def test_cpu_candidates_match_per_store_feature_and_have_no_gemm(cpu_target):
    for mod in (
        te_module(te_workload.matmul(64, 64, 64)),
        te_module(te_workload.conv2d_nhwc(1, 8, 8, 16, 16, 3, 1, 1)),
    ):
        ctx, cands = sample(mod, cpu_target, 6)
        assert_matches_per_store(ctx, cands, is_gpu=False)
        feats = featurize_candidates(ctx, cands)
        assert all(f is not None and not f.gemm_found and set(f.scopes) <= {"0"} for f in feats)
        assert all(f.stmt.shape[1] == 164 and len(f.stmt) >= 1 for f in feats)


def test_featurize_candidates_parts(cpu_target):
    ctx, cands = sample(te_module(te_workload.matmul(64, 64, 64)), cpu_target, 2)
    full = featurize_candidates(ctx, cands)
    psa_only = featurize_candidates(ctx, cands, stmt=False)
    stmt_only = featurize_candidates(ctx, cands, walk=False)
    for f, p, s in zip(full, psa_only, stmt_only):
        assert p.stmt is None and s.access is None and s.psa is None
        np.testing.assert_array_equal(f.psa, p.psa)
        np.testing.assert_array_equal(f.access, p.access)
        np.testing.assert_array_equal(f.stmt, s.stmt)
    assert featurize_candidates(ctx, []) == []


@pytest.mark.parametrize(
    "tensors, expected",
    [
        (te_workload.matmul(16, 16, 16), {"dense"}),
        (te_workload.batch_matmul_nkkm(2, 16, 16, 16), {"batch_matmul"}),
        (te_workload.conv2d_nhwc(1, 8, 8, 16, 16, 3, 1, 1), {"conv2d"}),
        (te_workload.conv2d_nchw(1, 8, 8, 16, 16, 3, 3, 1, 1), {"conv2d"}),
        (te_workload.depthwise_conv2d_nhwc(1, 8, 8, 16, 3, 1, 1), {"conv2d", "depthwise"}),
        (te_workload.softmax_mn(16, 32), {"softmax", "max"}),
    ],
)
def test_workload_tags(tensors, expected):
    tags = workload_tags(te_module(tensors))
    assert tags.shape == (10,) and tags.dtype == np.float32
    assert {TAG_NAMES[i] for i in np.flatnonzero(tags)} == expected


def test_workload_tags_from_compute_patterns():
    x = te.placeholder((16,), name="x")
    y = te.placeholder((16,), name="y")
    relu = te.compute((16,), lambda i: te.max(x[i], tvm.tirx.const(0, "float32")), name="compute")
    summed = te.compute((16,), lambda i: relu[i] + y[i], name="compute_1")
    tags = workload_tags(te_module([x, y, summed]))
    assert {TAG_NAMES[i] for i in np.flatnonzero(tags)} == {"max", "add"}


# -------------------------------------------------------------------------------------- CUDA


@pytest.fixture(scope="module")
def cuda_target():
    target = tvm_env.parse_target("nvidia/nvidia-h100")
    tvm_env.setup(target)
    return target


def hand_written_cuda_matmul():
    """64^3 matmul: 16 blocks x 16 threads, 4x4 accumulator in local memory, k split 8 x 8 with A and
    B tiles (16x8, 8x16) staged in shared memory by the 16 threads."""
    sch = tvm.s_tir.Schedule(te_module(te_workload.matmul(64, 64, 64)))
    c = sch.get_sblock("C")
    i, j, k = sch.get_loops(c)
    i0, i1, i2 = sch.split(i, [4, 4, 4])
    j0, j1, j2 = sch.split(j, [4, 4, 4])
    k0, k1 = sch.split(k, [8, 8])
    sch.reorder(i0, j0, i1, j1, k0, k1, i2, j2)
    sch.bind(sch.fuse(i0, j0), "blockIdx.x")
    tx = sch.fuse(i1, j1)
    sch.bind(tx, "threadIdx.x")
    sch.reverse_compute_at(sch.cache_write(c, 0, "local"), tx)
    for index in (0, 1):
        shared = sch.cache_read(c, index, "shared")
        sch.compute_at(shared, k0)
        _, t = sch.split(sch.fuse(*sch.get_loops(shared)[3:]), [None, 16])
        sch.bind(t, "threadIdx.x")
    sch.decompose_reduction(c, k0)
    return sch


def test_hand_written_cuda_matmul_gemm_and_psa(cuda_target):
    f = walk_features(hand_written_cuda_matmul().mod, is_gpu=True)
    # C_local init | A_shared <- A | B_shared <- B | C_local += A_shared * B_shared | C <- C_local
    assert f.scopes == "2010111220" and f.scopes.startswith(GEMM_NEEDLE)
    assert f.gemm_found
    np.testing.assert_array_equal(f.gemm, f.access[:8])
    update = f.access[5:8]
    np.testing.assert_array_equal(
        update[:, [A["read"], A["write"], A["read_write"]]], [[1, 0, 0], [1, 0, 0], [0, 0, 1]]
    )
    assert update[0, A["flops"]] == pytest.approx(slog(2 * 64**3))  # threads included
    assert update[0, A["alloc_bytes"]] == pytest.approx(slog(16 * 8 * 4))  # A_shared tile
    # PSA rows: C_local, A_shared, B_shared, C (order of first store)
    psa = dict(zip(PSA_COLUMNS, f.psa.T))
    np.testing.assert_array_equal(psa["grid"], 16)
    np.testing.assert_array_equal(psa["block"], 16)
    np.testing.assert_array_equal(psa["is_gpu"], 1)
    np.testing.assert_array_equal(psa["vthread"], 1)
    np.testing.assert_array_equal(psa["flops_per_thread"], [8 * 8 * 4 * 4 * 2, 0, 0, 0])
    np.testing.assert_array_equal(psa["total_flops"], [2 * 64**3, 0, 0, 0])
    np.testing.assert_array_equal(psa["registers"], [4 * 4 + 4 + 4, 0, 0, 0])  # m*n + m + n
    np.testing.assert_array_equal(psa["memory_work"], [8 * 4 + 8 * 4 + 4 * 4, 0, 0, 0])
    np.testing.assert_array_equal(psa["shared_footprint"], [0, 16 * 8, 8 * 16, 0])
    np.testing.assert_array_equal(psa["dram_traffic"], [0, 128 * 16, 128 * 16, 16 * 16 * 16])
    np.testing.assert_allclose(psa["reuse"], [1 + 2048 / 80, 1, 1, 1], rtol=1e-6)


@pytest.mark.parametrize(
    "tensors",
    [te_workload.matmul(128, 128, 128), te_workload.conv2d_nhwc(1, 14, 14, 32, 32, 3, 1, 1)],
    ids=["matmul", "conv2d"],
)
def test_metaschedule_cuda_schedules_have_the_gemm_needle(cuda_target, tensors):
    ctx, cands = sample(te_module(tensors), cuda_target, 4, seed=1)
    feats = featurize_candidates(ctx, cands)
    for f in feats:
        pos = f.scopes.find(GEMM_NEEDLE)
        assert f.gemm_found and pos >= 0
        np.testing.assert_array_equal(f.gemm, f.access[pos : pos + 8])
        assert (f.psa[:, P["is_gpu"]] == 1).all() and f.psa[:, P["block"]].max() > 1
    assert_matches_per_store(ctx, cands, is_gpu=True)
