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


def test_the_best_schedules_are_counted_by_their_stages(capsys):
    """Two 3x3 conv arms of the suite: one ended on a schedule whose reduction tiles are
    ry [1, 3, 1], rx [1, 1, 3], rc [2, 2, 16] (2 stages, 8.15 us), the other on ry [1, 1, 3],
    rx [1, 3, 1], rc [8, 8, 1] (8 stages, 13.14 us)."""
    from benchmark_files import REPO

    arms = REPO / "benchmarks" / "results" / "suite_databases" / "ablations"
    fast = arms / "suite_local" / "conv2d_1x35x35x64x96x3x1x1" / "moa-s1"
    slow = arms / "moa_pairs" / "conv2d_1x35x35x64x96x3x1x1" / "pruner-s5"
    (fast_us, fast_stages), (slow_us, slow_stages) = (
        draft_space.best_stages(str(fast)),
        draft_space.best_stages(str(slow)),
    )
    assert (fast_stages, slow_stages) == (2, 8)
    assert 8.1 < fast_us < 8.2 and 13.1 < slow_us < 13.2
    draft_space.main(["--best-of", str(fast), str(slow)])
    out = capsys.readouterr().out
    assert "| 2 | 1 | 8.15 / 8.15 / 8.15 |" in out and "| 8 | 1 | 13.14 / 13.14 / 13.14 |" in out
