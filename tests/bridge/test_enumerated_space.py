"""A first draft whose samples drew the task's whole space (`bridge.drafting.enumerated`): an injective
task's handful of CUDA thread extents is ranked, not evolved, and once measured the task is done,
on MetaSchedule's real sampling and evolution for an H100 (no GPU needed)."""

import tvm
from tvm import te

from bridge.draft_verify import DraftVerifySearch
from bridge.drafting import _EVOLVE, ENUMERATED_DRAWS, drew_whole_space, enumerated
from bridge.psa import PSACostModel
from bridge.search import _pairs
from data import zoo
from tvm_env import ms, parse_target, setup, task_context, tvm_ffi


def _add(n: int = 256) -> tvm.IRModule:
    a, b = te.placeholder((n, n), name="a"), te.placeholder((n, n), name="b")
    c = te.compute((n, n), lambda i, j: a[i, j] + b[i, j], name="c")
    return tvm.IRModule({"main": te.create_prim_func([a, b, c])})


def _strategy(mod: tvm.IRModule, population: int = 128) -> DraftVerifySearch:
    target = parse_target("nvidia/nvidia-h100")
    setup(target)
    strategy = DraftVerifySearch(draft=PSACostModel(device="h100"), population_size=population, potential_size=48)
    context = task_context(mod, target, strategy, "task", threads=1, seed=0)
    strategy.pre_tuning(
        64, 16, context.generate_design_space(), ms.database.MemoryDatabase(), ms.cost_model.RandomModel()
    )
    return strategy


def test_the_rule_asks_each_distinct_schedule_to_be_drawn_sixteen_times_on_average():
    assert ENUMERATED_DRAWS == 16
    assert enumerated(512, 6) and enumerated(512, 32) and enumerated(16, 1)
    assert not enumerated(512, 33) and not enumerated(73, 73) and not enumerated(0, 0)
    assert not enumerated(512, 6, singletons=1)  # a schedule drawn once: the space may hold more, never drawn
    assert drew_whole_space([1, 2] * 16) and not drew_whole_space([1, 2] * 15)
    assert not drew_whole_space([1] * 40 + [2])  # 41 draws of 2 schedules, but one of them drawn once


def test_an_injective_tasks_first_draft_ranks_its_whole_space_and_the_task_ends_once_it_is_measured():
    strategy = _strategy(_add())
    try:
        draft = strategy._new_draft()
        result = draft.run()
        keys = {k for k, _ in result.samples}
        assert result.enumerated and not result.unevolved
        assert result.stats["samples"] >= ENUMERATED_DRAWS * len(keys), result.stats
        # the population is the distinct samples, in PSA's order, and PSA scored only them: no evolution
        assert {k for k, _ in result.evolved} == keys and len(result.evolved) == len(keys)
        assert result.stats["draft_scored"] == len(keys)
        # the premise: MetaSchedule's evolution of those samples finds no schedule the samples lack
        evolved = _pairs(_EVOLVE(strategy.first_drafter, [s for _, s in result.samples], 128))
        assert evolved and {k for k, _ in evolved} <= keys
        strategy._take(result)
        scored = strategy.verify_model.scored
        picks, stats = strategy._search(16)
        assert {int(tvm_ffi.structural_hash(s.mod)) for s in picks} == keys  # the whole space in one batch
        assert stats["verify_scored"] == strategy.verify_model.scored - scored == len(keys)  # ranked, not evolved
        # picks that a prefetch left building (`_deferred`) are still handed out once the space is used up
        left = _pairs(picks)[:2]
        strategy._potential, strategy._samples, strategy._deferred = [], [], list(left)
        strategy.measured.update(keys - {k for k, _ in left})
        again, _ = strategy._search(16)
        assert [int(tvm_ffi.structural_hash(s.mod)) for s in again] == [k for k, _ in left] and not strategy._deferred
        strategy.measured.update(keys)
        assert strategy._search(16)[0] is None and strategy._drafts == 1  # done: no draft looks again
    finally:
        strategy._finish()


def test_a_task_with_a_real_space_still_evolves_its_first_draft():
    strategy = _strategy(zoo.operator_task("matmul:64,64,64").mod, population=64)
    try:
        result = strategy._new_draft().run()
        assert not result.enumerated and result.stats["draft_scored"] > result.stats["samples"]
        strategy._take(result)
        assert not strategy._enumerated
    finally:
        strategy._finish()


def test_an_enumerated_first_draft_started_ahead_is_ranked_on_its_thread_not_evolved():
    """With the first draft started at `pre_tuning` (`first_drafts_ahead`), the draft's thread ranks an
    enumerated space by the verifier without the verifier's generations, and the first batch is its top."""
    from bridge.pipeline import Pipeline
    from bridge.search_log import SearchLog
    from tests.bridge.test_drafting import _first_verify_search
    from tests.bridge.test_search import Tally

    pipeline, log, verify = Pipeline(), SearchLog(), Tally(ms.cost_model.RandomModel())
    strategy, _ = _first_verify_search(verify, pipeline, log, 64, ahead=True, mod=_add(), population=128)
    try:
        picks = strategy.generate_measure_candidates()
        first = log.searched("task")
        distinct = first["draft_scored"]  # the draft scored each distinct sample once, evolving none
        assert strategy._enumerated and first["drafted"] == 1 and len(picks) == min(4, distinct)  # batches of 4
        # the whole space ranked once, on the draft's thread: the verifier scored each schedule once
        assert first["verify_scored"] == verify.scored == distinct
        assert verify.calls == 1 and verify.threads[0].startswith("pruner-draft")
    finally:
        strategy.post_tuning()
        pipeline.close()
