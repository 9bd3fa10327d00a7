"""benchmarks/draft_round.py and benchmarks/draft_contention.py on a small CUDA task (drafting needs
no GPU): a smaller first draft samples and scores fewer schedules, and K drafts at once each draft."""

from benchmarks import draft_contention, draft_round

WORKLOAD = "conv2d:1,14,14,16,16,3,1,1"


def test_a_first_draft_of_half_the_population_asks_half_the_samples():
    common = ["--workload", WORKLOAD, "--rounds", "1", "--population", "64", "--potential", "32", "--threads", "2"]
    whole = draft_round.main([*common, "--walk-workers", "1"])
    half = draft_round.main([*common, "--walk-workers", "1", "--first-population", "32", "--first-min-samples", "4"])
    assert len(whole) == len(half) == 1
    # the first draft asks for its own population of fresh schedules (a pass of that many, again until
    # enough are valid: 4 against MetaSchedule's 50)
    assert half[0]["samples_asked"] == 32 and whole[0]["samples_asked"] == 64
    assert 4 <= half[0]["samples"] < whole[0]["samples"]
    assert half[0]["psa_scored"] < whole[0]["psa_scored"]


def test_drafts_at_once_each_draft_and_the_table_counts_them(capsys):
    lines = draft_contention.main(
        [
            "--workload",
            WORKLOAD,
            "--population",
            "32",
            "--concurrent",
            "1",
            "1",
            "2",
            "--threads",
            "1",
            "--walk-workers",
            "1",
            "--first-min-samples",
            "8",
        ]
    )
    assert [(line["concurrent"], line["threads"]) for line in lines] == [(1, 1), (1, 1), (2, 1)]
    for line in lines:
        assert len(line["seconds"]) == len(line["scored"]) == line["concurrent"]
        assert min(line["scored"]) > 32  # each draft scored its samples and its two generations' children
        assert 0 < max(line["seconds"]) <= line["wall_s"] + 1e-6 and line["cores"] > 0
    # the second configuration drafts the first's seed again: with a cache of PSA's walks of its own, it walks
    # every schedule again instead of finding them cached
    assert lines[1]["walked"] == lines[0]["walked"] > 32
    assert "drafts at once" in capsys.readouterr().out
