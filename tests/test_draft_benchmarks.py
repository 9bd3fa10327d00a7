"""benchmarks/draft_round.py and benchmarks/draft_contention.py on a small CUDA task (drafting needs
no GPU): a smaller first draft samples and scores fewer schedules, and K drafts at once each finish."""

from benchmarks import draft_contention, draft_round

WORKLOAD = "conv2d:1,14,14,32,32,3,1,1"


def test_a_first_draft_of_half_the_population_asks_half_the_samples():
    common = ["--workload", WORKLOAD, "--rounds", "1", "--population", "64", "--potential", "32", "--threads", "2"]
    whole = draft_round.main([*common, "--walk-workers", "1"])
    half = draft_round.main([*common, "--walk-workers", "1", "--first-population", "32", "--first-min-samples", "4"])
    assert len(whole) == len(half) == 1
    assert 0 < half[0]["samples"] and 0 < whole[0]["samples"]
    # a pass asks for the population's worth: 32 fresh schedules a pass against 64, whatever is valid
    assert half[0]["psa_scored"] < whole[0]["psa_scored"]
    assert half[0]["whole_s"] > 0 and half[0]["sample_s"] <= half[0]["whole_s"]


def test_drafts_at_once_each_finish_and_the_table_counts_them(capsys):
    lines = draft_contention.main(
        [
            "--workload",
            WORKLOAD,
            "--population",
            "32",
            "--concurrent",
            "1",
            "2",
            "--threads",
            "1",
            "--walk-workers",
            "1",
        ]
    )
    assert [(line["concurrent"], line["threads"]) for line in lines] == [(1, 1), (2, 1)]
    for line in lines:
        assert len(line["seconds"]) == line["concurrent"] and min(line["seconds"]) > 0
        assert max(line["seconds"]) <= line["wall_s"] + 1e-6 and line["cores"] > 0
    assert "drafts at once" in capsys.readouterr().out
