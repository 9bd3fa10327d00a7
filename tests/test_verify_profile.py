"""benchmarks/verify_profile.py on a real H100 tuning database (the ab9 dense layer), at a small size."""

from pathlib import Path

import pytest
from benchmark_files import fastest_records

from benchmarks import verify_profile

DB = (
    Path(__file__).resolve().parents[1]
    / "benchmarks/results/suite_databases/ablations/ab9_fill64/dense_128x3072x768/pruner-s0"
)


def test_a_draft_round_then_a_profiled_verify_round(capsys, tmp_path):
    # PAM trains on the database's 40 best: a copy with its 60 best (of 1,448) trains it the same, and the
    # search's start-up replays 60 records' traces for its measured set, not 1,448 (13 s here)
    db = fastest_records(DB, tmp_path / "db", 60)
    out = verify_profile.main(
        ["--workload", "dense:128,3072,768", "--database", str(db), "--records", "40", "--population", "64"]
        + ["--potential", "32", "--batch", "16", "--top", "8", "--draft-generations", "0"]
    )
    drafted, verified = out["draft_round"], out["verify_round"]
    assert drafted["drafted"] == 1 and drafted["draft_s"] > 0 and drafted["samples"] > 0
    assert verified["drafted"] == 0 and verified["cold_start"] == 0  # PAM learned from the records: it ranks
    assert 0 < verified["verifier_s"] < verified["verify_s"] <= verified["wall_s"]
    assert "_verify" in out["profile"] and "verify_round:" in capsys.readouterr().out
    lowering = out["lowering"]  # PerStoreFeature on pre-lowered modules gives the very same rows
    assert lowering["candidates"] > 0 and lowering["identical"] == lowering["candidates"]
    assert lowering["per_store_feature_s"] > 0 and lowering["on_lowered_s"] > 0 and lowering["our_lowering_s"] > 0


def test_a_folder_without_a_database_is_named(tmp_path):
    with pytest.raises(ValueError, match="no database_workload.json"):
        verify_profile.main(["--workload", "dense:128,3072,768", "--database", str(tmp_path)])
