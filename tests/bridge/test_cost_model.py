"""PrunerCostModel on really measured llvm records: every mode, online training, MoA adaptation, save/load."""

import numpy as np
import pytest
import torch

from bridge.cost_model import MODES, PrunerCostModel
from bridge.export import export_checkpoint, load_artifact
from data.batch import make_batch
from data.features import featurize_candidates, workload_tags
from data.labels import mean_latency


@pytest.fixture(scope="module")
def artifacts(checkpoints, tmp_path_factory):
    root = tmp_path_factory.mktemp("artifacts")
    return {name: str(export_checkpoint(path, root / f"{name}.pt").path) for name, path in checkpoints.items()}


def pairwise_accuracy(scores: np.ndarray, latency: np.ndarray) -> float:
    ok = np.isfinite(latency)
    s, lat = scores[ok], latency[ok]
    i, j = np.triu_indices(len(s), 1)
    return float(np.mean((s[i] > s[j]) == (lat[i] < lat[j])))


def latencies(results) -> np.ndarray:
    return np.array([mean_latency([float(x) for x in r.run_secs]) for r in results])


def test_mode_arguments_are_checked(artifacts):
    with pytest.raises(ValueError, match="mode='ansor'"):
        PrunerCostModel(mode="ansor")
    with pytest.raises(ValueError, match="trains from scratch"):
        PrunerCostModel(mode="pam", artifact=artifacts["PAMModule"])
    with pytest.raises(ValueError, match="needs a pretrained artifact"):
        PrunerCostModel(mode="pam-no-update")
    with pytest.raises(ValueError, match="needs a MLPNet artifact"):
        PrunerCostModel(mode="mlp-no-update", artifact=artifacts["PAMModule"])
    with pytest.raises(ValueError, match="PAMNet or MoANet"):
        PrunerCostModel(mode="pam-siamese-update", artifact=artifacts["MLPModule"])


@pytest.mark.parametrize("mode", ["pam", "mlp"])
def test_online_modes_start_equal_then_learn_the_measurements(measured_matmul, mode, tmp_path):
    context, candidates, results = measured_matmul
    model = PrunerCostModel(mode=mode, epochs=30, patience=None, device="cpu")
    before = model.predict(context, candidates)
    assert before.dtype == np.float64 and before.shape == (len(candidates),)
    assert np.all(before == before[0]) and before[0] > 0
    for start in range(0, len(candidates), 8):  # three measured rounds
        model.update(context, candidates[start : start + 8], results[start : start + 8])
    after = model.predict(context, candidates)
    assert np.all(after > 0) and np.ptp(after) > 0
    # It fit the records it trained on (LambdaRank weighs the top most): the best-scored schedule is
    # among the 3 fastest, and pairs are ordered clearly better than at random.
    lat = latencies(results)
    assert np.argmax(after) in np.argsort(lat)[:3]
    assert pairwise_accuracy(after, lat) > 0.6
    model.save(str(tmp_path / "state.bin"))
    again = PrunerCostModel(mode=mode, device="cpu")
    again.load(str(tmp_path / "state.bin"))
    np.testing.assert_array_equal(again.predict(context, candidates), after)
    assert again.rounds == 3 and sum(len(d["latency"]) for d in again.data.values()) == len(candidates)


def test_no_update_modes_score_like_the_artifact_and_never_train(measured_matmul, artifacts):
    context, candidates, results = measured_matmul
    for mode, name in (("pam-no-update", "PAMModule"), ("mlp-no-update", "MLPModule")):
        model = PrunerCostModel(mode=mode, artifact=artifacts[name], device="cpu")
        scores = model.predict(context, candidates)
        feats = featurize_candidates(context, candidates, walk=mode.startswith("pam"))
        gemm = np.stack([f.gemm if f.gemm is not None else np.zeros((8, 23), np.float32) for f in feats])
        net = load_artifact(artifacts[name]).net
        with torch.no_grad():
            raw = net(make_batch([f.stmt for f in feats], workload_tags(context.mod), gemm)).double().numpy()
        np.testing.assert_allclose(scores, np.logaddexp(0, raw), rtol=1e-6)
        model.update(context, candidates, results)
        np.testing.assert_array_equal(model.predict(context, candidates), scores)
        assert model.data == {} and model.rounds == 0


def test_siamese_mode_adapts_every_fourth_round_with_momentum(measured_matmul, artifacts, tmp_path):
    context, candidates, results = measured_matmul
    model = PrunerCostModel(  # the published rate (the default adapts every round)
        mode="pam-siamese-update", artifact=artifacts["PAMModule"], epochs=3, adapt_every=4, device="cpu"
    )
    pretrained = {k: v.clone() for k, v in model.net.target.state_dict().items()}
    first = model.predict(context, candidates)
    for r in range(3):
        model.update(context, candidates[6 * r : 6 * r + 6], results[6 * r : 6 * r + 6])
        np.testing.assert_array_equal(model.predict(context, candidates), first)  # no adaptation yet
    model.update(context, candidates[18:], results[18:])  # the 4th round adapts
    assert not np.array_equal(model.predict(context, candidates), first)
    online, target = model.net.online.state_dict(), model.net.target.state_dict()
    name = "stmt_encoder.mlp.0.weight"
    torch.testing.assert_close(target[name], 0.99 * pretrained[name] + 0.01 * online[name])
    torch.testing.assert_close(target["stmt_scale"], pretrained["stmt_scale"])  # normalization kept
    model.save(str(tmp_path / "moa.bin"))
    again = PrunerCostModel(mode="pam-siamese-update", artifact=artifacts["PAMModule"], device="cpu")
    again.load(str(tmp_path / "moa.bin"))
    np.testing.assert_array_equal(again.predict(context, candidates), model.predict(context, candidates))


def test_the_tuning_config_sets_how_often_moa_adapts(measured_matmul, artifacts):
    from bridge.config import CostModelConfig
    from bridge.factory import make_cost_model

    context, candidates, results = measured_matmul
    changed = {}
    for every in (1, 4):
        config = CostModelConfig(
            name="pam-siamese-update", checkpoint=artifacts["PAMModule"], epochs=3, adapt_every=every
        )
        model = make_cost_model(config)
        assert model.adapt_every == every
        first = model.predict(context, candidates)
        model.update(context, candidates[:6], results[:6])  # one round: adapts only when every round does
        changed[every] = not np.array_equal(model.predict(context, candidates), first)
    assert changed == {1: True, 4: False}
    with pytest.raises(ValueError, match="--adapt-every 0 must be >= 1"):
        CostModelConfig(adapt_every=0)


def test_learn_on_featurized_records_is_update_without_tvm(measured_matmul, artifacts):
    # An offline replay feeds records read back from shards: learn / score_features must do what
    # update / predict do with the same features, in every mode.
    context, candidates, results = measured_matmul
    for mode, artifact in (
        ("pam", None),
        ("pam-siamese-update", artifacts["PAMModule"]),
        ("pam-no-update", artifacts["PAMModule"]),
    ):
        live = PrunerCostModel(mode=mode, artifact=artifact, epochs=3, adapt_every=1, device="cpu")
        replay = PrunerCostModel(mode=mode, artifact=artifact, epochs=3, adapt_every=1, device="cpu")
        key = live._task(context)
        replay.tags[key] = live.tags[key]
        feats = live._featurize(context, candidates)
        np.testing.assert_array_equal(replay.score_features(key, feats), live.predict(context, candidates))
        live.update(context, candidates[:12], results[:12])
        replay.learn(key, feats[:12], latencies(results[:12]))
        assert replay.rounds == live.rounds and replay.trained == live.trained
        np.testing.assert_allclose(replay.score_features(key, feats), live.predict(context, candidates), rtol=1e-6)
        if mode == "pam-no-update":
            assert replay.data == {}
        else:
            assert len(replay.data[key]["latency"]) == 12
    with pytest.raises(ValueError, match="zip"):  # a latency for each record
        replay = PrunerCostModel(mode="pam", epochs=1, device="cpu")
        replay.learn("k", feats[:3], [1e-3, 2e-3])


def test_loading_a_state_of_another_mode_fails(tmp_path, measured_matmul):
    PrunerCostModel(mode="mlp").save(str(tmp_path / "mlp.bin"))
    with pytest.raises(ValueError, match="saved in mode 'mlp'"):
        PrunerCostModel(mode="pam").load(str(tmp_path / "mlp.bin"))
    (tmp_path / "junk.bin").write_bytes(b"not torch")
    with pytest.raises(ValueError, match="junk.bin: cannot read"):
        PrunerCostModel(mode="pam").load(str(tmp_path / "junk.bin"))
    assert set(MODES) == {"pam", "pam-siamese-update", "pam-no-update", "mlp", "mlp-no-update"}


def test_nan_scores_are_refused(checkpoints, measured_matmul):
    import torch

    context, candidates, _ = measured_matmul
    model = PrunerCostModel(mode="pam-no-update", artifact=checkpoints["PAMModule"], device="cpu")
    with torch.no_grad():
        next(model.net.parameters()).fill_(float("nan"))
    with pytest.raises(ValueError, match="scores are NaN or inf"):
        model.predict(context, candidates)


def test_online_updates_stay_bounded_past_the_replay_size(measured_matmul, monkeypatch):
    """Past `replay` records an update continues the current network (for `warm_epochs`) on at most
    `replay` records instead of retraining a fresh one on everything measured."""
    import copy

    import torch

    import bridge.cost_model as cost_model_module

    calls = []
    real = cost_model_module.train_online

    def spy(net, batches, *, epochs, **kwargs):
        calls.append((copy.deepcopy(net.state_dict()), epochs, sum(len(b["label"]) for b in batches)))
        return real(net, batches, epochs=epochs, **kwargs)

    monkeypatch.setattr(cost_model_module, "train_online", spy)
    context, candidates, results = measured_matmul
    assert len(candidates) >= 12
    model = PrunerCostModel(mode="pam", device="cpu", epochs=2, warm_epochs=1, replay=8, seed=0)
    model.update(context, candidates[:4], results[:4])
    model.update(context, candidates[4:8], results[4:8])  # 8 records <= replay: a fresh network
    assert model.trained  # waits for the training in the background
    trained = copy.deepcopy(model.net.state_dict())
    model.update(context, candidates[8:12], results[8:12])  # 12 > replay: warm, on <= 8 records
    assert model.trained
    assert [(epochs, n) for _, epochs, n in calls] == [(2, 4), (2, 8), (1, 8)]
    for name, value in calls[2][0].items():  # the warm update started from the trained network
        torch.testing.assert_close(value, trained[name])
    assert model.measured() == 12 and np.isfinite(model.predict(context, candidates)).all()


@pytest.mark.parametrize("mode", ["pam", "pam-siamese-update"])
def test_background_training_scores_as_training_in_turn_and_leaves_update_at_once(
    measured_matmul, artifacts, mode, monkeypatch
):
    """`update` returns while its training runs (the next batch's search need not wait for it), and
    the next `predict` waits for it: the scores are those of a model that trains before `update`
    returns."""
    import threading

    import bridge.cost_model as cost_model_module

    context, candidates, results = measured_matmul
    artifact = artifacts["PAMModule"] if mode != "pam" else None
    kwargs = dict(mode=mode, artifact=artifact, epochs=3, replay=12, warm_epochs=2, device="cpu", seed=3)
    in_turn = PrunerCostModel(background=False, **kwargs)
    for start in range(0, 18, 6):  # the third update of "pam" is a warm one (18 > replay)
        in_turn.update(context, candidates[start : start + 6], results[start : start + 6])
    expected = in_turn.predict(context, candidates)

    release, started = threading.Event(), threading.Event()
    real_train, real_adapt = cost_model_module.train_online, cost_model_module.MoANet.adapt

    def held(real):
        def wrapper(*args, **kw):
            started.set()
            assert release.wait(60), "the test never released the training"
            return real(*args, **kw)

        return wrapper

    monkeypatch.setattr(cost_model_module, "train_online", held(real_train))
    monkeypatch.setattr(cost_model_module.MoANet, "adapt", held(real_adapt))
    model = PrunerCostModel(background=True, **kwargs)
    model.update(context, candidates[:6], results[:6])  # returns with its training held
    assert started.wait(60) and model._trainer.running
    release.set()
    for start in range(6, 18, 6):
        model.update(context, candidates[start : start + 6], results[start : start + 6])
    np.testing.assert_array_equal(model.predict(context, candidates), expected)
    assert model.learn_s > 0 and model.rounds == in_turn.rounds == 3


def test_a_failed_background_training_is_raised_by_the_next_predict(measured_matmul, monkeypatch):
    import bridge.cost_model as cost_model_module

    def broken(*args, **kwargs):
        raise RuntimeError("CUDA error: out of memory")

    monkeypatch.setattr(cost_model_module, "train_online", broken)
    context, candidates, results = measured_matmul
    model = PrunerCostModel(mode="pam", epochs=2, device="cpu")
    model.update(context, candidates[:8], results[:8])  # returns: the training fails on its thread
    with pytest.raises(RuntimeError, match="out of memory"):
        model.predict(context, candidates)


def test_a_state_saved_without_waiting_is_written_after_the_training_it_follows(measured_matmul, tmp_path, monkeypatch):
    """`save_later` (what the tuning loop does each round) returns while the batch's training
    runs, and writes a state whose network learned from every record in it."""
    import threading

    import bridge.cost_model as cost_model_module

    context, candidates, results = measured_matmul
    release = threading.Event()
    real = cost_model_module.train_online

    def held(*args, **kwargs):
        assert release.wait(60), "the test never released the training"
        return real(*args, **kwargs)

    monkeypatch.setattr(cost_model_module, "train_online", held)
    model = PrunerCostModel(mode="pam", epochs=2, device="cpu")
    path = tmp_path / "state.bin"
    model.update(context, candidates[:8], results[:8])
    model.save_later(str(path))
    model.update(context, candidates[8:16], results[8:16])  # recorded after the save: not in its state
    assert not path.exists()  # written after the training, which is held
    release.set()
    expected = model.predict(context, candidates)  # waits for both trainings and the save between them
    saved = PrunerCostModel(mode="pam", device="cpu")
    saved.load(str(path))
    assert saved.rounds == 1 and saved.measured() == 8 and saved.trained
    first = PrunerCostModel(mode="pam", epochs=2, device="cpu", background=False)
    first.update(context, candidates[:8], results[:8])  # the network the saved state must hold
    np.testing.assert_array_equal(saved.predict(context, candidates), first.predict(context, candidates))
    assert not np.array_equal(expected, first.predict(context, candidates))  # the second training moved on
