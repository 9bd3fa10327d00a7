"""benchmarks/adapt_replay.py: online learning replayed on a featurized tuning database."""

import pytest
from benchmark_files import REPO, load_benchmark

from data.featurize import main as featurize_main

adapt_replay = load_benchmark("adapt_replay")
TASK = "tests/fixtures/tiny_records/llvm-sapphirerapids-2c/matmul_e87e4aed"
ARTIFACT = "bridge/weights/pam-cuda-sm_90a.pt"


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    out = tmp_path_factory.mktemp("replay") / "shards"
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(REPO)  # record sources are the paths featurize was given
        featurize_main([TASK, "--out", str(out), "--workers", "1"])
    return str(out)


def test_each_variant_scores_a_batch_before_learning_from_it(shards, monkeypatch):
    monkeypatch.chdir(REPO)
    records = sum(1 for line in open(f"{TASK}/database_tuning_record.json") if line.strip())
    variants = ("psa", "pam", "pretrained", "moa-2", "moa-1")
    run = lambda rounds: adapt_replay.adapt_replay(  # noqa: E731
        shards, (TASK,), ARTIFACT, variants=variants, batch=8, rounds=rounds, epochs=3
    )[TASK]
    one = run(1)
    assert one["pam"] == one["psa"]  # nothing learned before the first batch: the cold start ranks as PSA
    assert one["moa-1"] == one["moa-2"] == one["pretrained"]  # every adaptation comes after its batch
    two = run(2)
    assert two["moa-2"] == two["pretrained"]  # moa-2 adapts after its 2nd batch, so it scored both unadapted
    assert two["moa-1"] != two["pretrained"]  # moa-1 adapted after the first
    assert two["pam"] != two["psa"]
    every = run(99)
    assert every["psa"]["batches"] == -(-records // 8)  # all the batches there are
    for r in (*one.values(), *every.values()):
        assert 0.0 <= r["pairwise"] <= 1.0 and 0.0 <= r["peak1"] <= 1.0
    blended = adapt_replay.adapt_replay(
        shards, (TASK,), ARTIFACT, variants=("psa", "pam", "pretrained"), batch=8, rounds=1, epochs=3, psa_weight=1.0
    )[TASK]
    assert sorted(blended) == ["pam", "pam+psa", "pretrained", "pretrained+psa", "psa"]
    assert blended["pam+psa"] == blended["psa"]  # a cold model's equal scores leave the order to PSA
    assert blended["pretrained"] == one["pretrained"]
    gated = lambda rounds: adapt_replay.adapt_replay(  # noqa: E731
        shards, (TASK,), ARTIFACT, variants=("psa", "pretrained"), batch=8, rounds=rounds, epochs=3, gate=True
    )[TASK]
    first = gated(1)
    assert sorted(first) == ["pretrained", "pretrained+gate", "psa"]
    assert first["pretrained+gate"] == first["pretrained"]  # no pair judged before the first batch: the verifier ranks
    assert 0.0 <= gated(99)["pretrained+gate"]["pairwise"] <= 1.0


def test_an_ensemble_of_learners_ranks_as_its_trained_members(shards, monkeypatch):
    monkeypatch.chdir(REPO)
    variants = ("pam", "moa-1", "pam&moa-1", "pam&pam")
    run = lambda rounds: adapt_replay.adapt_replay(  # noqa: E731
        shards, (TASK,), ARTIFACT, variants=variants, batch=8, rounds=rounds, epochs=3
    )[TASK]
    one = run(1)
    assert one["pam&moa-1"] == one["moa-1"]  # the cold pam adds nothing: the pretrained member's order
    three = run(3)
    assert three["pam&pam"] == three["pam"]  # two identical learners (same seed): z + z keeps the one's order
    assert three["pam&moa-1"]["batches"] == 3.0 and 0.0 <= three["pam&moa-1"]["pairwise"] <= 1.0


def test_workload_means_average_seeds_first():
    row = lambda p, k: {"v": {"pairwise": p, "peak1": k, "batches": 3.0}}  # noqa: E731
    results = {"r/a/x-s0": row(0.5, 1.0), "r/a/x-s1": row(0.7, 0.0), "r/b/x-s0": row(0.9, 0.4)}
    means = adapt_replay.workload_means(results)["v"]
    assert means["workloads"] == 2.0
    assert means["pairwise"] == pytest.approx((0.6 + 0.9) / 2) and means["peak1"] == pytest.approx((0.5 + 0.4) / 2)


def test_bad_arguments_are_refused(shards):
    with pytest.raises(ValueError, match="only learners join"):
        adapt_replay.adapt_replay(shards, (TASK,), ARTIFACT, variants=("psa&pam",))
    with pytest.raises(ValueError, match="variant 'moa-0'"):
        adapt_replay.adapt_replay(shards, (TASK,), ARTIFACT, variants=("moa-0",))
    with pytest.raises(ValueError, match="batch=1"):
        adapt_replay.adapt_replay(shards, (TASK,), ARTIFACT, batch=1)
    with pytest.raises(ValueError, match="--psa_weight -1.0 must be finite"):
        adapt_replay.adapt_replay(shards, (TASK,), ARTIFACT, psa_weight=-1.0)
    with pytest.raises(ValueError, match="holds no record of nowhere"):
        adapt_replay.adapt_replay(shards, ("nowhere",), ARTIFACT, variants=("psa",))
