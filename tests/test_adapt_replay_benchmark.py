"""benchmarks/adapt_replay.py: online learning replayed on a featurized tuning database."""

import pytest
from benchmark_files import REPO, load_benchmark

from data.featurize import main as featurize_main

adapt_replay = load_benchmark("adapt_replay")
TASK = "tests/fixtures/tiny_records/llvm-sapphirerapids-2c/matmul_e87e4aed"
ARTIFACT = "bridge/weights/pam-cuda-sm_90a.pt"


def rank(result: dict) -> dict:
    """A variant's ranking results, without its seconds of learning (which differ run to run)."""
    return {k: v for k, v in result.items() if k != "learn_s"}


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
    assert rank(one["pam"]) == one["psa"]  # nothing learned before the first batch: the cold start ranks as PSA
    assert rank(one["moa-1"]) == rank(one["moa-2"]) == rank(one["pretrained"])  # every adaptation comes after its batch
    two = run(2)
    assert rank(two["moa-2"]) == rank(
        two["pretrained"]
    )  # moa-2 adapts after its 2nd batch, so it scored both unadapted
    assert rank(two["moa-1"]) != rank(two["pretrained"])  # moa-1 adapted after the first
    assert rank(two["pam"]) != two["psa"]
    every = run(99)
    assert every["psa"]["batches"] == -(-records // 8)  # all the batches there are
    for r in (*one.values(), *every.values()):
        assert 0.0 <= r["pairwise"] <= 1.0 and 0.0 <= r["peak1"] <= 1.0
    blended = adapt_replay.adapt_replay(
        shards, (TASK,), ARTIFACT, variants=("psa", "pam", "pretrained"), batch=8, rounds=1, epochs=3, psa_weight=1.0
    )[TASK]
    assert sorted(blended) == ["pam", "pam+psa", "pretrained", "pretrained+psa", "psa"]
    assert blended["pam+psa"] == blended["psa"]  # a cold model's equal scores leave the order to PSA
    assert rank(blended["pretrained"]) == rank(one["pretrained"])
    gated = lambda rounds: adapt_replay.adapt_replay(  # noqa: E731
        shards, (TASK,), ARTIFACT, variants=("psa", "pretrained"), batch=8, rounds=rounds, epochs=3, gate=True
    )[TASK]
    first = gated(1)
    assert sorted(first) == ["pretrained", "pretrained+gate", "psa"]
    assert first["pretrained+gate"] == rank(
        first["pretrained"]
    )  # no pair judged before the first batch: the verifier ranks
    assert 0.0 <= gated(99)["pretrained+gate"]["pairwise"] <= 1.0


def test_an_ensemble_of_learners_ranks_as_its_trained_members(shards, monkeypatch):
    monkeypatch.chdir(REPO)
    variants = ("pam", "moa-1", "pam&moa-1", "pam&pam")
    run = lambda rounds: adapt_replay.adapt_replay(  # noqa: E731
        shards, (TASK,), ARTIFACT, variants=variants, batch=8, rounds=rounds, epochs=3
    )[TASK]
    one = run(1)
    assert rank(one["pam&moa-1"]) == rank(one["moa-1"])  # the cold pam adds nothing: the pretrained member's order
    three = run(3)
    assert rank(three["pam&pam"]) == rank(
        three["pam"]
    )  # two identical learners (same seed): z + z keeps the one's order
    assert three["pam&moa-1"]["batches"] == 3.0 and 0.0 <= three["pam&moa-1"]["pairwise"] <= 1.0


def test_a_small_replay_trains_warm_sooner_and_learning_is_timed(shards, monkeypatch):
    """pam-rN retrains from nothing while it holds at most N records, then continues its network: with
    N past the replayed records it ranks as pam does, with N of one batch it parts from pam once warm."""
    monkeypatch.chdir(REPO)
    # batches of 4: six scored of the fixture's task, three of them by a warm pam-r8 (with batches of 8, one
    # warm batch of three, whose pairs the two networks ordered alike on some hosts)
    run = lambda rounds: adapt_replay.adapt_replay(  # noqa: E731
        shards, (TASK,), ARTIFACT, variants=("pam", "pam-r8", "pam-r100000"), batch=4, rounds=rounds, epochs=3
    )[TASK]
    two, many = run(2), run(8)
    assert rank(two["pam-r8"]) == rank(two["pam"])  # the 2nd batch is scored by a network fit on 4 records: fresh
    assert rank(many["pam-r100000"]) == rank(many["pam"])
    assert many["pam"]["batches"] == 6.0
    assert rank(many["pam-r8"]) != rank(many["pam"])  # from the 4th batch on (past 8 records), a warm network ranks
    assert all(many[n]["learn_s"] > 0 for n in ("pam", "pam-r8", "pam-r100000"))
    with pytest.raises(ValueError, match="variant 'pam-r0'"):
        adapt_replay.adapt_replay(shards, (TASK,), ARTIFACT, variants=("pam-r0",))


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
