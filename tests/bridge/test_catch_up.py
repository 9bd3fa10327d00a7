"""A resumed cost model catches up with its database (`bridge.catch_up`), on the real matmul records."""

import pytest
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


def _xgb():
    from bridge.xgb import SafeXGBModel

    return SafeXGBModel(num_warmup_samples=0, num_tuning_cores=1)


def test_an_xgb_state_a_batch_behind_learns_the_records_it_missed_once(measured_matmul, measured_database, tmp_path):
    """MetaSchedule's model saves after each batch, once the batch is in the database: a kill between
    the two leaves its state a batch behind, which the resume catches up."""
    context, candidates, results = measured_matmul
    half = len(candidates) // 2
    killed = _xgb()
    killed.update(context, candidates[:half], results[:half])
    killed.save(str(tmp_path / "xgb.npz"))
    resumed = _xgb()
    resumed.load(str(tmp_path / "xgb.npz"))
    assert resumed.data_size == half and resumed.seen_in(context) == {
        schedule_key(c.sch.mod) for c in candidates[:half]
    }
    assert catch_up(resumed, context, measured_database) == len(candidates) - half
    assert catch_up(resumed, context, measured_database) == 0
    whole = _xgb()
    whole.update(context, candidates, results)
    assert resumed.data_size == whole.data_size == len(candidates)  # each record once
    (group,) = resumed.data.values()
    assert sorted(group.costs) == sorted(next(iter(whole.data.values())).costs)  # the same records as a run not killed
    resumed.save(str(tmp_path / "again.npz"))
    again = _xgb()
    again.load(str(tmp_path / "again.npz"))
    assert again.seen == resumed.seen  # unsigned 64-bit keys, bit for bit


def test_an_xgb_state_saved_before_seen_keys_is_left_as_it_is(measured_matmul, measured_database, tmp_path):
    import numpy as np

    context, candidates, results = measured_matmul
    model = _xgb()
    model.update(context, candidates[:4], results[:4])
    model.save(str(tmp_path / "xgb.npz"))
    with np.load(tmp_path / "xgb.npz", allow_pickle=False) as f:
        arrays = {k: f[k] for k in f.files if not k.startswith("seen_")}  # as earlier versions wrote it
    np.savez(tmp_path / "old.npz", **arrays)
    old = _xgb()
    old.load(str(tmp_path / "old.npz"))
    assert old.seen is None and old.seen_in(context) is None
    assert catch_up(old, context, measured_database) == 0  # cannot tell: never twice
    assert old.data_size == 4


def test_an_xgb_state_whose_seen_keys_disagree_is_refused_naming_the_file(measured_matmul, tmp_path):
    import numpy as np
    import pytest

    context, candidates, results = measured_matmul
    model = _xgb()
    model.update(context, candidates[:4], results[:4])
    model.save(str(tmp_path / "xgb.npz"))
    with np.load(tmp_path / "xgb.npz", allow_pickle=False) as f:
        arrays = {k: f[k] for k in f.files}
    arrays["seen_counts"] = arrays["seen_counts"] + 1
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(ValueError, match="bad.npz"):
        _xgb().load(str(tmp_path / "bad.npz"))


def test_a_record_that_no_longer_replays_is_skipped_with_a_warning(measured_matmul, measured_database, caplog):
    """A record of the task whose trace names a block its workload does not have (a trace of another
    module, committed under the matmul's workload) is skipped, and the others are caught up on."""
    from tvm import te

    from tvm_env import ms, tvm

    context, candidates, _ = measured_matmul
    a = te.placeholder((8,), name="A")
    other = tvm.IRModule({"main": te.create_prim_func([a, te.compute((8,), lambda i: a[i] * 2, name="other")])})
    sch = tvm.s_tir.Schedule(other)
    sch.get_sblock("other")
    record = measured_database.get_all_tuning_records()[0]
    workload = measured_database.commit_workload(context.mod)
    measured_database.commit_tuning_record(
        ms.database.TuningRecord(sch.trace, workload, record.run_secs, context.target, record.args_info)
    )
    model = PrunerCostModel(mode="pam", epochs=1, device="cpu", background=False)
    assert catch_up(model, context, measured_database) == len(candidates)
    assert "cannot replay a measured record for the cost model" in caplog.text


@pytest.mark.parametrize("kind", ["draft-verify", "evolutionary"])
@pytest.mark.parametrize("store", ["memory", "json"])
def test_a_resumed_tasks_records_are_replayed_once_for_the_catch_up_and_the_search(
    measured_matmul, tmp_path, monkeypatch, kind, store
):
    """With the run's `ReplayMemo` the search's `pre_tuning` takes the catch-up's replays of the task's
    records instead of replaying them again (`bridge.tuning` shares one), and knows the same measured
    schedules; a record committed in between makes it replay afresh."""
    from bridge.draft_verify import DraftVerifySearch
    from bridge.psa import PSACostModel
    from bridge.search import ResumableEvolutionarySearch
    from data.replay import ReplayMemo
    from tests.bridge.conftest import database_of
    from tests.bridge.test_search import context_for
    from tvm_env import ms

    context, candidates, results = measured_matmul
    if store == "memory":
        database = database_of(context, candidates, results)
    else:  # the kind `bridge.database.open_database` gives a tuning run
        (tmp_path / "db").mkdir()
        database = ms.database.JSONDatabase(work_dir=str(tmp_path / "db"))
        workload = database.commit_workload(context.mod)
        for cand, res in zip(candidates, results):
            database.commit_tuning_record(
                ms.database.TuningRecord(cand.sch.trace, workload, res.run_secs, context.target, cand.args_info)
            )
    replayed = []
    as_candidate = ms.database.TuningRecord.as_measure_candidate

    def counted(record):
        replayed.append(1)
        return as_candidate(record)

    monkeypatch.setattr(ms.database.TuningRecord, "as_measure_candidate", counted)

    def resume(replays, extra=False):
        model = PrunerCostModel(mode="pam", epochs=1, device="cpu", background=False)
        assert catch_up(model, context, database, replays) == len(candidates)
        if extra:  # a record committed after the catch-up: the search must see it
            workload = database.commit_workload(context.mod)
            database.commit_tuning_record(
                ms.database.TuningRecord(
                    candidates[0].sch.trace, workload, [1.0], context.target, candidates[0].args_info
                )
            )
        if kind == "draft-verify":
            strategy = DraftVerifySearch(
                draft=PSACostModel(device="a100"), population_size=48, potential_size=12, replays=replays
            )
        else:
            strategy = ResumableEvolutionarySearch(population_size=48, replays=replays)
        task = context_for(context.mod, strategy)
        strategy.pre_tuning(len(candidates) + 8, 4, task.generate_design_space(), database, ms.cost_model.RandomModel())
        measured = strategy.measured
        strategy.post_tuning()
        return measured

    without = resume(None)
    assert len(replayed) == 2 * len(candidates)  # the catch-up's replay, then the search's
    replayed.clear()
    memo = ReplayMemo()
    assert resume(memo) == without == {schedule_key(c.sch.mod) for c in candidates}
    assert len(replayed) == len(candidates) and memo.hits == len(candidates)  # once
    replayed.clear()
    memo = ReplayMemo()
    assert resume(memo, extra=True) == without  # the extra record is a schedule measured already
    assert len(replayed) == 2 * len(candidates) + 1 and memo.hits == 0  # the records changed: replayed afresh
