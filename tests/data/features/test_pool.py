"""WalkPool: the walk on worker processes gives exactly the in-process features."""

import numpy as np
import pytest
from tvm.s_tir.meta_schedule.testing import te_workload

from data.features import WalkPool, featurize_candidates
from tests.tvm_env.test_builder import alive
from tvm_env import parse_target, setup


@pytest.fixture(scope="module")
def cuda_candidates(sample, te_module):
    """(context, candidates) of a CUDA matmul design space, sampled and lowered without a GPU.

    A V100 target (sm_70) has no tensor-core rules, so the slow CUDA tensor-intrinsic import is not
    needed (setup() without a target registers only the stub).
    """
    setup()
    return sample(te_module(te_workload.matmul(256, 256, 256)), parse_target("nvidia/nvidia-v100"), 16, threads=2)


def test_walk_pool_gives_the_in_process_features(cuda_candidates):
    """The process pool walks serialized modules: same features as in this process, stmt or not."""
    context, candidates = cuda_candidates
    pool = WalkPool(2, chunk=8, min_batch=8)
    assert pool.takes(8) and not pool.takes(7) and not WalkPool(1).takes(1000)
    for stmt in (False, True):
        expected = featurize_candidates(context, candidates, stmt=stmt)
        got = featurize_candidates(context, candidates, stmt=stmt, pool=pool)
        assert len(got) == len(expected) == len(candidates)
        for a, b in zip(got, expected):
            assert a.scopes == b.scopes and a.gemm_found == b.gemm_found
            for field in ("psa", "access", "gemm") + (("stmt",) if stmt else ()):
                np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
            assert stmt or a.stmt is None
    pids = [w._proc.pid for w in pool._pool._worker_map.values()]
    pool.close()  # the workers end now, not when the pool is collected
    assert pids and alive(pids) == []
    pool.close()  # twice: nothing more to end
    # a later walk starts them again
    again = featurize_candidates(context, candidates[:8], pool=pool)
    assert pool._pool is not None and alive([w._proc.pid for w in pool._pool._worker_map.values()])
    np.testing.assert_array_equal(again[0].psa, expected[0].psa)
    pool.close()


def test_a_call_is_split_evenly_about_two_chunks_a_worker():
    """A draft's call of 70 modules on 16 workers went to 5 of them in chunks of 16."""
    assert WalkPool(16).chunk_size(70) == 3  # 24 chunks: every worker busy
    assert WalkPool(16).chunk_size(330) == 11  # 30 chunks, not 21 of 16 (two rounds of the slowest)
    assert WalkPool(16).chunk_size(512) == 16 == WalkPool(16).chunk_size(5000)  # capped at `chunk`
    assert WalkPool(2, chunk=8).chunk_size(16) == 4 and WalkPool(4).chunk_size(1) == 1


def test_bad_pool_arguments_are_refused():
    with pytest.raises(ValueError, match="workers=-1"):
        WalkPool(-1)
    with pytest.raises(ValueError, match="chunk=0"):
        WalkPool(2, chunk=0)


def test_a_batch_is_serialized_while_another_holds_the_workers(cuda_candidates):
    """Two threads' batches (a draft beside the rounds): the second is serialized while the first
    still holds the workers, and walks once they are free, with the in-process features."""
    import threading
    import time

    from data.features.walk import walk_modules

    context, candidates = cuda_candidates
    mods = [c.sch.mod for c in candidates[:8]]
    pool = WalkPool(2, chunk=4, min_batch=4)
    out = {}
    try:
        with pool._lock:  # the first batch, holding the workers
            second = threading.Thread(target=lambda: out.setdefault("walked", pool.walk(mods, True, 1)))
            second.start()
            deadline = time.monotonic() + 20
            while pool.serialized < len(mods) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert pool.serialized == len(mods) and second.is_alive() and "walked" not in out
        second.join(120)
        expected = walk_modules(mods, True)
        assert [w.psa.tolist() for w in out["walked"]] == [w.psa.tolist() for w in expected]
    finally:
        pool.close()
