"""benchmarks/search_overhead.py: a real draft-then-verify search for a CUDA target on the host, with
the stand-in device, and its cost accounting."""

import json

from benchmark_files import load_benchmark

search_overhead = load_benchmark("search_overhead")


def _run(method: str, out, trials: int, per_round: int, device_s: float) -> dict:
    """One method's `trials` on a small dense layer, `device_s` a build and a run on the stand-in device."""
    args = ["--workloads", "dense:16,64,64", "--methods", method, "--trials", str(trials), "--out", str(out)]
    args += ["--trials-per-round", str(per_round), "--build-s", str(device_s), "--run-s", str(device_s)]
    (row,) = search_overhead.main(args)
    return row


def test_a_gated_pruner_search_is_measured_with_the_stand_in_device(tmp_path):
    out = tmp_path / "so"
    row = _run("pruner-gate", out, trials=8, per_round=4, device_s=0.05)  # two rounds
    assert json.loads((out / "results.json").read_text()) == [row]
    assert row["method"] == "pruner-gate" and row["trials"] == 8
    assert row["wall_s"] >= 8 * (0.05 + 0.05)  # the stand-in device's time is real time
    # the search is what is left: it drafted (a share of the run) and took time of its own
    assert 0.0 < row["draft_share"] < 1.0 and row["search_s_per_trial"] > 0.0
    # the drafting split: MetaSchedule's sampling and PSA's scoring, the rest its evolution
    assert 0.0 < row["draft_sampling_share"] and 0.0 < row["draft_psa_share"]
    assert row["draft_sampling_share"] + row["draft_psa_share"] < 1.0
    assert 0.0 <= row["device_idle_share"] <= 1.0


def test_moa_from_the_shipped_model_with_draft_rounds_asks_the_verifier_from_its_third_batch(tmp_path):
    from bridge.search_log import read_rounds

    out = tmp_path / "so"
    row = _run("moa-draft2", out, trials=12, per_round=4, device_s=0.01)  # three rounds
    assert row["method"] == "moa-draft2" and row["trials"] == 12
    assert 0 < row["first_batches_s"] < row["second_batches_s"]
    run = out / "dense_16x64x64-moa-draft2"
    assert (run / "cost_model.pam-siamese-update.bin").exists()  # MoA's model, from the shipped artifact
    rounds = read_rounds(run / "tuning_curve.csv")
    assert len(rounds) >= 3
    # the first two batches: PSA's picks, a cold start whatever the verifier; then the pretrained verifier ranks
    assert [r["cold_start"] for r in rounds[:3]] == [1.0, 1.0, 0.0]
    assert rounds[0]["verify_scored"] == rounds[1]["verify_scored"] == 0 and rounds[2]["verify_scored"] > 0
