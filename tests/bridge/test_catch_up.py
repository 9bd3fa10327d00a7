"""A resumed cost model catches up with its database (`bridge.catch_up`), on the real matmul records."""

import torch

from bridge.catch_up import catch_up
from bridge.cost_model import PrunerCostModel
from data.features import schedule_key


def test_a_state_a_batch_behind_learns_the_records_it_missed_once(measured_matmul, measured_database, tmp_path):
    context, candidates, results = measured_matmul
    half = len(candidates) // 2
    killed = PrunerCostModel(mode="pam", epochs=2, device="cpu", background=False)
    killed.update(context, candidates[:half], results[:half])  # the state on disk: the first batch only
    killed.save(str(tmp_path / "state.bin"))
    database = measured_database  # the database: both batches
    resumed = PrunerCostModel(mode="pam", epochs=2, device="cpu", background=False)
    resumed.load(str(tmp_path / "state.bin"))
    assert resumed.measured() == half and len(resumed.seen_in(context)) == half
    assert catch_up(resumed, context, database) == len(candidates) - half
    assert resumed.measured() == len(candidates)  # every record of the database, each once
    assert catch_up(resumed, context, database) == 0  # nothing left to learn
    whole = PrunerCostModel(mode="pam", epochs=2, device="cpu", background=False)
    whole.update(context, candidates, results)
    latencies = sorted(resumed.data[resumed._task(context)]["latency"])
    assert latencies == sorted(whole.data[whole._task(context)]["latency"])  # the same records as a run not killed


def test_a_state_saved_before_seen_keys_is_left_as_it_is(measured_matmul, measured_database, tmp_path):
    context, candidates, results = measured_matmul
    model = PrunerCostModel(mode="pam", epochs=2, device="cpu", background=False)
    model.update(context, candidates[:4], results[:4])
    model.save(str(tmp_path / "state.bin"))
    state = torch.load(tmp_path / "state.bin", weights_only=True)
    del state["seen"]  # as the states of earlier versions were written
    torch.save(state, tmp_path / "old.bin")
    old = PrunerCostModel(mode="pam", epochs=2, device="cpu", background=False)
    old.load(str(tmp_path / "old.bin"))
    assert old.seen is None and old.seen_in(context) is None
    assert catch_up(old, context, measured_database) == 0  # cannot tell: never twice
    assert old.measured() == 4


def test_seen_keys_survive_the_state_file_bit_for_bit(measured_matmul, tmp_path):
    context, candidates, results = measured_matmul
    model = PrunerCostModel(mode="pam", epochs=2, device="cpu", background=False)
    model.update(context, candidates, results)
    model.save(str(tmp_path / "state.bin"))
    loaded = PrunerCostModel(mode="pam", epochs=2, device="cpu", background=False)
    loaded.load(str(tmp_path / "state.bin"))
    assert loaded.seen == model.seen  # unsigned 64-bit hashes, kept in an int64 tensor
    assert loaded.seen_in(context) == {schedule_key(c.sch.mod) for c in candidates}
