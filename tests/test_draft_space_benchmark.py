"""benchmarks/draft_space.py: a real first draft of a small batch_matmul for an H100 target (no GPU needed)."""

from benchmark_files import load_benchmark

import tvm_env

draft_space = load_benchmark("draft_space")


def test_first_draft_counts_the_potential_space_by_reduction_stages():
    target = tvm_env.parse_target("nvidia/nvidia-h100")
    tvm_env.setup(target)
    counts = draft_space.first_draft("batch_matmul:2,32,32,64", target, "traffic-occupancy", 0, 64, 16)
    assert 0 < sum(counts.values()) <= 16
    # the reduction (K = 64) is split into a power-of-two number of stages that divides it
    assert all(k is not None and 64 % k == 0 for k in counts)
