"""PSA rows and the GEMM matrix of a hand-written CUDA matmul, counted by hand."""

import math

import numpy as np
import pytest
from tvm import te
from tvm.s_tir.meta_schedule.testing import te_workload

from data.features import ACCESS_COLUMNS, GEMM_NEEDLE, PSA_COLUMNS, walk_features
from tvm_env import tvm

A = {name: i for i, name in enumerate(ACCESS_COLUMNS)}


def slog(x):
    return math.copysign(math.log2(abs(x) + 1), x)


def hand_written_cuda_matmul():
    """64^3 matmul: 16 blocks x 16 threads, 4x4 accumulator in local memory, k split 8 x 8 with A and
    B tiles (16x8, 8x16) staged in shared memory by the 16 threads."""
    sch = tvm.s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func(te_workload.matmul(64, 64, 64))}))
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
    # over every trip: each shared tile is loaded once per stage of the k split (8 stages)
    np.testing.assert_array_equal(psa["dram_traffic_all"], [0, 128 * 16 * 8, 128 * 16 * 8, 16 * 16 * 16])
    np.testing.assert_allclose(psa["reuse"], [1 + 2048 / 80, 1, 1, 1], rtol=1e-6)
