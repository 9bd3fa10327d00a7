"""benchmarks/sample_yield.py and benchmarks/enumerated_drafts.py on MetaSchedule's real sampling for an
H100 (no GPU needed): a matmul's passes yield some valid schedules each, an injective task's yield all
of a handful, and an enumerated task's first draft ranks that handful where the evolved one does not."""

import json

from benchmarks import enumerated_drafts, sample_yield
from bridge.drafting import ENUMERATED_DRAWS

NETWORK = ["--network", "bert_tiny", "--input-size", "16"]


def test_passes_yield_valid_schedules_and_the_passes_a_draft_needs_follow(tmp_path, capsys):
    out = tmp_path / "yield.json"
    rows = sample_yield.main(
        ["--workload", "matmul:64,64,64", "--passes", "2", "--population", "32", "--threads", "1", "--out", str(out)]
    )
    (row,) = rows
    assert len(row["valid"]) == len(row["seconds"]) == 2 and all(s > 0 for s in row["seconds"])
    assert all(0 < v <= 32 for v in row["valid"]) and not row["enumerated"]  # a real space
    mean = sum(row["valid"]) / 2
    assert (row["passes_for_50"] - 1) * mean < 50 <= row["passes_for_50"] * mean
    assert row["passes_for_16"] <= row["passes_for_50"]
    assert json.loads(out.read_text())["rows"] == rows
    assert "| matmul:64,64,64 |" in capsys.readouterr().out
    # beside it, the constrained sampler's passes: as many draws a pass, only those that fit replayed
    fitted = row["constrained"]
    assert len(fitted["valid"]) == 2 and all(0 < v <= 32 for v in fitted["valid"])
    stats = fitted["stats"]
    assert stats["passes"] == 2 and stats["draws"] == 64 and stats["turned_away"] > 0
    assert stats["replays"] == 64 - stats["turned_away"] == stats["valid"] + stats["postproc_failed"]
    assert row["constrained_ms_a_valid"] == 1000 * sum(fitted["seconds"]) / sum(fitted["valid"])


def test_an_injective_tasks_pass_is_all_valid_and_draws_its_few_schedules_again_and_again():
    matmul, gelu = sample_yield.main([*NETWORK, "--tasks", "2", "--passes", "1", "--threads", "1"])
    assert "matmul" in matmul["task"] and 0 < matmul["valid"][0] < 512 and not matmul["enumerated"]
    assert "gelu" in gelu["task"] and gelu["valid"] == [512] and gelu["passes_for_50"] == gelu["passes_for_16"] == 1
    assert gelu["enumerated"] and 512 >= ENUMERATED_DRAWS * gelu["distinct"]


def test_enumerated_first_drafts_rank_the_whole_space_where_evolved_ones_evolve_it(tmp_path):
    argv = [*NETWORK, "--tasks", "2", "--repeats", "1", "--threads", "1", "--out", str(tmp_path / "e.json")]
    summary = enumerated_drafts.main(argv)
    matmul, gelu = summary["rows"]
    assert not matmul["enumerated"] and "ranked" not in matmul  # a real space: only sampled, not drafted twice
    assert gelu["enumerated"]
    (ranked,), (evolved,) = gelu["ranked"], gelu["evolved"]
    assert ranked["enumerated"] and not evolved["enumerated"]
    # ranked: the distinct samples, each scored once; evolved: the same space, no schedule the samples lack
    assert ranked["population"] == ranked["distinct"] == ranked["draft_scored"]
    assert evolved["population"] <= evolved["distinct"] and evolved["draft_scored"] >= evolved["distinct"]
    assert ranked["draft_s"] > 0 and evolved["draft_s"] > 0
    assert summary["total_draft_s"]["ranked"] == ranked["draft_s"]
    assert json.loads((tmp_path / "e.json").read_text())["network"] == "bert_tiny"
