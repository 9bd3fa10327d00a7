"""Local moves (`local_share`): a share of each batch is one-mutation neighbours of the task's best
measured schedules, on real llvm records and a real tuning run."""

import pytest

from benchmarks import plateau
from bridge.config import SearchConfig
from bridge.cost_model import PrunerCostModel
from bridge.draft_verify import DraftVerifySearch
from bridge.psa import PSACostModel
from bridge.search_log import SearchLog, read_rounds
from tests.bridge.test_search import POPULATION, context_for, key, matmul, tune_matmul
from tvm_env import ms


def _search(database, **options) -> DraftVerifySearch:
    """A draft-then-verify search on the measured matmul's task, tuning started on `database`."""
    strategy = DraftVerifySearch(
        draft=PSACostModel(device="a100"), population_size=POPULATION, potential_size=12, log=SearchLog(), **options
    )
    context = context_for(matmul(), strategy)
    strategy.pre_tuning(64, 8, context.generate_design_space(), database, ms.cost_model.RandomModel(seed=0))
    return strategy


def _steps(sch) -> tuple[list[str], dict[int, str]]:
    """A schedule's trace without its postprocessing: its instructions and its decisions by instruction."""
    insts, decisions = sch.trace.simplified(remove_postproc=True).as_json()
    return [str(i) for i in insts], {int(d[0]): str(d[1]) for d in decisions}


def test_local_moves_are_one_mutation_from_a_best_measured_schedule(measured_matmul, measured_database):
    measured = {key(c.sch) for c in measured_matmul[1]}
    strategy = _search(measured_database, local_share=0.5, local_parents=4)
    parents = [_steps(s) for s in strategy._best_measured(4)]
    moves = strategy._local(6, set(), by_draft=True)
    assert 0 < len(moves) <= 6
    assert len({k for k, _ in moves}) == len(moves)  # distinct
    assert not {k for k, _ in moves} & measured  # never one measured already
    for _, sch in moves:  # each differs from one of the 4 best measured in one tile, unroll or location
        assert min(d for p in parents if (d := plateau.distance(p, _steps(sch))) is not None) == 1
    taken = {moves[0][0]}
    assert moves[0][0] not in {k for k, _ in strategy._local(6, taken, by_draft=True)}  # what the batch holds
    strategy.post_tuning()


def test_a_batch_holds_its_share_of_local_moves_once_the_task_has_measurements(measured_database):
    strategy = _search(measured_database, local_share=0.5)
    batch = strategy.generate_measure_candidates()
    stats = strategy.log.searched(strategy.task_name)
    assert len(batch) == 8 and len({key(c.sch) for c in batch}) == 8
    assert stats["local"] == 4  # half of the batch; the verifier's (here PSA's, cold) picks the rest
    strategy.post_tuning()
    fresh = _search(ms.database.MemoryDatabase(), local_share=0.5)  # nothing measured: no parents
    batch = fresh.generate_measure_candidates()
    assert len(batch) == 8 and fresh.log.searched(fresh.task_name)["local"] == 0
    fresh.post_tuning()


def test_a_real_run_with_local_moves_logs_them_and_measures_each_schedule_once(tmp_path, builder, runner):
    log = SearchLog()
    strategy = DraftVerifySearch(
        draft=PSACostModel(device="a100"), population_size=POPULATION, potential_size=12, local_share=0.5, log=log
    )
    verify = PrunerCostModel(mode="pam", epochs=3, device="cpu")
    database = tune_matmul(strategy, log, verify, tmp_path, trials=12, builder=builder, runner=runner)
    records = database.get_all_tuning_records()
    assert len(records) == 12 and len({str(r.trace) for r in records}) == 12
    log.write_csv(tmp_path / "curve.csv")
    rows = read_rounds(tmp_path / "curve.csv")
    assert rows[0]["local"] == 0 and all(r["local"] == 2 for r in rows[1:])  # rounds of 4: 2 local moves


def test_local_options_are_checked_and_reach_the_search():
    with pytest.raises(ValueError, match="local_share"):
        DraftVerifySearch(draft=PSACostModel(device="a100"), local_share=1.5)
    with pytest.raises(ValueError, match="local_parents"):
        DraftVerifySearch(draft=PSACostModel(device="a100"), local_parents=0)
    search = DraftVerifySearch.from_config(SearchConfig(psa="a100", local_share=0.25, local_parents=4))
    assert (search.local_share, search.local_parents) == (0.25, 4)
