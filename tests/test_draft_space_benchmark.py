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


def test_the_best_schedules_are_counted_by_their_stages(capsys, tmp_path):
    """Two 3x3 conv arms of the suite: one ended on a schedule whose reduction tiles are
    ry [1, 3, 1], rx [1, 1, 3], rc [2, 2, 16] (2 stages, 8.15 us), the other on ry [1, 1, 3],
    rx [1, 3, 1], rc [8, 8, 1] (8 stages, 13.14 us)."""
    from benchmark_files import REPO, fastest_records

    arms = REPO / "benchmarks" / "results" / "suite_databases" / "ablations"
    conv = "conv2d_1x35x35x64x96x3x1x1"
    # each arm's 5 fastest records (its best among them): read_records parses them, not 1,500 an arm
    fast = fastest_records(arms / "suite_local" / conv / "moa-s1", tmp_path / "fast", 5)
    slow = fastest_records(arms / "moa_pairs" / conv / "pruner-s5", tmp_path / "slow", 5)
    draft_space.main(["--best-of", str(fast), str(slow)])  # best_stages of each, counted
    out = capsys.readouterr().out
    assert "| 2 | 1 | 8.15 / 8.15 / 8.15 |" in out and "| 8 | 1 | 13.14 / 13.14 / 13.14 |" in out
