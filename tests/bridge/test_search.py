"""Search strategies on real llvm tuning: PSA scores many, PAM few; cold start; resume; the round log.

Over 400 lines: each test here drives `DraftVerifySearch` through a real MetaSchedule tuning run and
shares the module's task and context helpers (`context_for`, `matmul`, imported by test_drafting);
split by concept, they would each repeat that set-up."""

import math
import threading
import time

import numpy as np
import pytest
from tvm import te
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.testing import te_workload

import bridge.search
import data.replay
from bridge.config import SearchConfig
from bridge.cost_model import PrunerCostModel
from bridge.draft_verify import DraftVerifySearch
from bridge.drafting import Draft
from bridge.psa import PSACostModel
from bridge.search import CountingCostModel, ResumableEvolutionarySearch, _measured_keys
from bridge.search_log import SearchLog, read_rounds
from bridge.stall_rule import share_allows
from tvm_env import ms, parse_target, setup, task_context, task_loggers, tvm, tvm_ffi

TARGET = {"kind": "llvm", "mcpu": "native", "num-cores": 2}
POPULATION, POTENTIAL = 48, 12


@derived_object
class Tally(ms.cost_model.PyCostModel):
    """Counts every candidate handed to the wrapped model, independently of the strategy's counters,
    and names the thread of each call."""

    def __init__(self, model):
        super().__init__()
        self.model, self.calls, self.scored, self.threads, self.sizes = model, 0, 0, [], []
        self.context_threads = []  # the num_threads of the context each call was handed

    def load(self, path):
        self.model.load(path)

    def save(self, path):
        self.model.save(path)

    def update(self, context, candidates, results):
        self.model.update(context, candidates, results)

    def predict(self, context, candidates):
        self.calls += 1
        self.scored += len(candidates)
        self.threads.append(threading.current_thread().name)
        self.sizes.append(len(candidates))
        self.context_threads.append(int(context.num_threads))
        return self.model.predict(context, candidates)


def context_for(mod, strategy, seed=0, clone=False, threads=2):
    """A task context; with clone=False the context initializes `strategy` itself (inspectable here),
    with clone=True it runs a clone, as tune.py's contexts do."""
    target = parse_target(TARGET)
    setup(target)
    context = task_context(mod, target, strategy, "task", threads=threads, seed=seed)
    return context.clone() if clone else context


def matmul(n=64):
    return tvm.IRModule({"main": te.create_prim_func(te_workload.matmul(n, n, n))})


def key(sch):
    return int(tvm_ffi.structural_hash(sch.mod))


def unpicked(potential, picks):
    """The potential-space schedules that were not picked, as candidates."""
    chosen = {key(c.sch) for c in picks}
    return [
        ms.MeasureCandidate(s, ms.arg_info.ArgInfo.from_entry_func(s.mod, remove_preproc=True))
        for s in potential
        if key(s) not in chosen
    ]


def tune_matmul(strategy, log: SearchLog, cost_model, work, trials: int, builder, runner):
    """A real tuning run of the 64^3 matmul with `strategy`, 4 trials a round, logged to `log`, built on
    `builder` and measured on `runner` (the module's, whose processes start once)."""
    return ms.tune_tasks(
        tasks=[context_for(matmul(), strategy, clone=True)],
        task_weights=[1.0],
        work_dir=str(work),
        max_trials_global=trials,
        num_trials_per_iter=4,
        builder=log.builder(builder),
        runner=log.runner(runner),
        cost_model=cost_model,
        measure_callbacks=[*ms.measure_callback.MeasureCallback.create("default"), log.callback()],
    )


@pytest.fixture(scope="module")
def tuned(tmp_path_factory, builder, runner):
    """A real 3-round draft-then-verify tuning run (PSA drafts, online PAM verifies) on a 64^3 matmul."""
    work = tmp_path_factory.mktemp("dv")
    draft, log = Tally(PSACostModel(device="a100")), SearchLog()
    verify = Tally(PrunerCostModel(mode="pam", epochs=5, device="cpu"))
    strategy = DraftVerifySearch(
        draft=draft,
        population_size=POPULATION,
        potential_size=POTENTIAL,
        redraft_every=2,
        quick_start=False,
        local_share=0.0,  # what PSA and PAM score for the draft and the verify alone; local moves add to PAM's
        log=log,
    )
    database = tune_matmul(strategy, log, verify, work, trials=12, builder=builder, runner=runner)
    return database, log, draft, verify


def test_psa_scores_many_and_pam_few(tuned):
    _, log, draft, verify = tuned
    rows = log.rows
    assert len(rows) == 3 and [r["trials"] for r in rows] == [4, 4, 4]
    assert [r["drafted"] for r in rows] == [1, 0, 1]  # redraft_every=2: a new potential space every 2nd round
    assert sum(r["draft_scored"] for r in rows) == draft.scored  # the log counts what PSA really scored
    assert sum(r["verify_scored"] for r in rows) == verify.scored
    for r in rows:
        if r["drafted"]:
            assert r["draft_scored"] >= POPULATION  # the whole sampled population, then its children
            assert r["draft_scored"] > 3 * r["verify_scored"]
            # MetaSchedule's sampling, timed within the draft: some valid fresh schedules, in part of its time
            assert 0 < r["samples"] and 0 < r["sample_s"] < r["draft_s"]
            # PSA's own seconds (featurize + score), within the draft beside the sampling; the rest is
            # MetaSchedule's evolution
            assert 0 < r["psa_s"] and r["sample_s"] + r["psa_s"] < r["draft_s"]
        else:
            assert r["draft_scored"] == 0 and r["psa_s"] == 0
            assert math.isnan(r["samples"]) and math.isnan(r["sample_s"])  # no draft, no sampling
        assert 0 < r["verifier_s"] < r["verify_s"]  # PAM's scoring, within the verify step
        # PAM sees the potential space (+ one generation of it), never a draft population per generation.
        assert 0 < r["verify_scored"] <= 2 * (POTENTIAL + POTENTIAL)
        assert all(math.isfinite(r[k]) and r[k] >= 0 for k in ("draft_s", "verify_s", "build_s", "run_s"))
    assert [r["cold_start"] for r in rows] == [1, 0, 0]  # PAM had no data in round 1 only
    assert all(math.isnan(r["gated"]) and math.isnan(r["verifier_acc"]) for r in rows)  # no verify gate


@pytest.mark.parametrize("ahead", [True, False])
def test_quick_start_measures_ranked_samples_first_and_evolves_them_next(ahead):
    """quick_start: the first batch is PSA's top of the fresh samples, unevolved. With draft_ahead the
    evolution of them runs alongside, never held by the drafting share, while the next rounds measure
    the ranked samples, and a later round takes it up; without, the next round evolves them in turn."""
    strategy = _stall_search(
        80, 4, quick_start=True, redraft_stall=0, draft_ahead=ahead, redraft_share=0.15, log=SearchLog()
    )
    strategy.ledger.note(1e6)  # the run's drafting far over its share: a stall's draft would be held
    first = _round(strategy)
    assert first["drafted"] == 1 and 0 < first["draft_scored"] <= POPULATION  # the samples ranked once, no children
    assert strategy._unevolved
    second = _round(strategy)
    if not ahead:  # evolved in turn: samples and children scored
        assert second["drafted"] == 1 and second["draft_scored"] > first["draft_scored"]
        assert not strategy._unevolved
        strategy.post_tuning()
        return
    assert second["drafted"] == 0 and second.get("draft_started") == 1 and not second.get("draft_held")
    assert strategy._unevolved and strategy._background is not None  # the round measured ranked samples
    strategy._background.result()  # let it end
    taken = _round(strategy)
    assert taken["drafted"] == 1 and taken["draft_scored"] > first["draft_scored"] and not strategy._unevolved
    assert strategy._background is None and strategy._drafts == 2
    strategy.post_tuning()


def test_tuning_wrote_distinct_records_and_the_curve(tuned, tmp_path):
    database, log, _, _ = tuned
    records = database.get_all_tuning_records()
    assert len(records) == 12
    assert len({key(r.as_measure_candidate().sch) for r in records}) == 12
    best = min(np.mean([float(s) for s in r.run_secs]) for r in records)
    assert log.rows[-1]["best_us"] == pytest.approx(best * 1e6, rel=1e-5)
    assert log.rows[-1]["estimated_ms"] == pytest.approx(best * 1e3, rel=1e-5)
    assert [r["total_trials"] for r in log.rows] == [4, 8, 12]
    log.write_csv(tmp_path / "curve.csv", previous=[{**log.rows[0], "task": "earlier"}])
    rows = read_rounds(tmp_path / "curve.csv")
    assert [r["task"] for r in rows] == ["earlier", "task", "task", "task"]
    assert rows[-1]["total_trials"] == 12.0


def test_cold_start_follows_psa_then_the_verifier_decides(tmp_path, checkpoints):
    from bridge.export import export_checkpoint

    psa = PSACostModel(device="a100")
    untrained = PrunerCostModel(mode="pam", device="cpu")
    strategy = DraftVerifySearch(draft=psa, population_size=POPULATION, potential_size=POTENTIAL, verify_generations=0)
    context = context_for(matmul(), strategy)
    strategy.pre_tuning(8, 4, context.generate_design_space(), ms.database.MemoryDatabase(), untrained)
    picks = strategy.generate_measure_candidates()
    assert len(picks) == 4
    rest = unpicked(strategy.potential, picks)
    assert len(rest) == POTENTIAL - 4  # the picks come from the potential space
    assert psa.predict(context, picks).min() >= psa.predict(context, rest).max()  # PSA's top of the potential space
    strategy.post_tuning()

    artifact = export_checkpoint(checkpoints["PAMModule"], tmp_path / "pam.pt").path
    pretrained = PrunerCostModel(mode="pam-no-update", artifact=artifact, device="cpu")
    strategy = DraftVerifySearch(draft=psa, population_size=POPULATION, potential_size=POTENTIAL, verify_generations=0)
    context = context_for(matmul(), strategy, seed=1)
    strategy.pre_tuning(8, 4, context.generate_design_space(), ms.database.MemoryDatabase(), pretrained)
    picks = strategy.generate_measure_candidates()
    rest = unpicked(strategy.potential, picks)
    assert len(rest) == POTENTIAL - 4
    assert pretrained.predict(context, picks).min() >= pretrained.predict(context, rest).max()  # PAM's top now


def test_draft_rounds_pick_a_pretrained_verifiers_first_batches_in_psas_order(tmp_path, checkpoints):
    """`draft_rounds`: a pretrained verifier is not asked for a task's first k batches, which are the top of
    the potential space in PSA's order (logged as a cold start); from batch k + 1 it ranks, as without."""
    from bridge.export import export_checkpoint

    artifact = export_checkpoint(checkpoints["PAMModule"], tmp_path / "pam.pt").path
    draft = Tally(PSACostModel(device="a100"))
    verify = Tally(PrunerCostModel(mode="pam-no-update", artifact=artifact, device="cpu"))
    strategy = DraftVerifySearch(
        draft=draft,
        population_size=POPULATION,
        potential_size=2 * POTENTIAL,
        verify_generations=0,
        draft_rounds=2,
        local_share=0.0,  # whole batches from the ranking; local moves, from batch 2 on, in test_local_moves.py
    )
    context = context_for(matmul(), strategy, seed=1)
    strategy.pre_tuning(12, 4, context.generate_design_space(), ms.database.MemoryDatabase(), verify)
    measured = set()
    for batch in (1, 2, 3):
        asked = verify.scored
        picks = strategy.generate_measure_candidates()
        rest = [c for c in unpicked(strategy.potential, picks) if key(c.sch) not in measured]
        assert len(picks) == 4 and len(rest) >= 4
        if batch <= 2:  # PSA's top of the space; the verifier never scored a candidate
            assert verify.scored == asked == 0
            assert draft.model.predict(context, picks).min() >= draft.model.predict(context, rest).max()
        else:  # the verifier's top
            assert verify.scored > asked
            assert verify.model.predict(context, picks).min() >= verify.model.predict(context, rest).max()
        strategy.notify_runner_results(picks, [ms.runner.RunnerResult([1e-3], None) for _ in picks])
        measured |= {key(c.sch) for c in picks}
    strategy.post_tuning()
    with pytest.raises(ValueError, match="draft_rounds"):
        DraftVerifySearch(draft=draft.model, draft_rounds=-1)
    assert SearchConfig(psa="a100", draft_rounds=3).draft_rounds == 3
    assert DraftVerifySearch.from_config(SearchConfig(psa="a100", draft_rounds=3)).draft_rounds == 3


@pytest.mark.parametrize("kind", ["draft-verify", "evolutionary"])
def test_resume_counts_and_skips_measured_schedules(measured_matmul, measured_database, kind):
    context0, candidates, results = measured_matmul
    database = measured_database
    measured = {key(c.sch) for c in candidates}
    if kind == "draft-verify":
        strategy = DraftVerifySearch(
            draft=PSACostModel(device="a100"), population_size=POPULATION, potential_size=POTENTIAL
        )
    else:
        strategy = ResumableEvolutionarySearch(population_size=POPULATION)
    context = context_for(context0.mod, strategy)
    strategy.pre_tuning(
        len(candidates) + 6, 4, context.generate_design_space(), database, ms.cost_model.RandomModel(seed=0)
    )
    assert strategy.budget == 6
    assert strategy.best_before == pytest.approx(min(np.mean([float(t) for t in r.run_secs]) for r in results))
    proposed = []
    while (batch := strategy.generate_measure_candidates()) is not None:
        proposed += batch
        strategy.notify_runner_results(batch, [ms.runner.RunnerResult([1e-3], None)] * len(batch))
    assert len(proposed) == 6
    assert not {key(c.sch) for c in proposed} & measured
    strategy.post_tuning()


def _stall_search(trials: int, batch: int, **options):
    """A draft-then-verify search on the matmul whose drafts come only from the stall rule (the
    potential space never runs low), tuning started; the drafts run in turn unless `draft_ahead` says
    otherwise (the rounds below count them as they happen), and no drafting share holds them unless
    `redraft_share` says so (a test's rounds take milliseconds, against a draft's second)."""
    options.setdefault("draft_ahead", False)
    options.setdefault("redraft_share", None)
    options.setdefault("redraft_below", 0.0)
    options.setdefault("draft", PSACostModel(device="a100"))
    strategy = DraftVerifySearch(population_size=POPULATION, potential_size=POPULATION, **options)
    context = context_for(matmul(), strategy)
    strategy.pre_tuning(
        trials, batch, context.generate_design_space(), ms.database.MemoryDatabase(), ms.cost_model.RandomModel()
    )
    return strategy


def test_a_tasks_first_draft_evolves_for_its_own_generations_and_the_rest_as_set():
    """first_draft_generations: the first draft (most of the first batch's time) evolves for its own
    generations, scoring fewer children with fewer; the later drafts for draft_generations."""
    one = _stall_search(80, 4, first_draft_generations=1, log=SearchLog())
    two = _stall_search(80, 4, log=SearchLog())
    assert one.first_drafter is not one.drafter and two.first_drafter is two.drafter  # no second search unless set
    assert one._new_draft().drafter is one.first_drafter
    first_one, first_two = _round(one), _round(two)
    assert first_one["drafted"] == first_two["drafted"] == 1
    assert first_one["draft_scored"] < first_two["draft_scored"]  # one generation of children against two
    assert one._new_draft().drafter is one.drafter and one._new_draft().sampler is one.resampler
    for strategy in (one, two):
        strategy.post_tuning()
    with pytest.raises(ValueError, match="first_draft_generations"):
        DraftVerifySearch(draft=PSACostModel(device="a100"), first_draft_generations=-1)
    assert (
        DraftVerifySearch.from_config(SearchConfig(psa="a100", first_draft_generations=1)).first_draft_generations == 1
    )


def test_a_tasks_first_draft_runs_on_its_own_threads_and_logs_to_the_tasks_log(tmp_path):
    """first_draft_threads: the first draft samples, evolves and scores on a copy of the task's
    context with that many threads (MetaSchedule's evolution hands the draft model the context it was
    initialized with), which writes to the task's own MetaSchedule log (the run's `loggers`, by task
    name); the later drafts run on the task's context; unset, no copy is made."""
    (logger,) = task_loggers(str(tmp_path), ["task"])
    drafts = Tally(PSACostModel(device="a100"))
    one = _stall_search(80, 4, first_draft_threads=1, draft=drafts, log=SearchLog(), loggers={"task": logger})
    assert int(one.context.num_threads) == 2 and int(one.first_context.num_threads) == 1
    assert one.first_context.task_name == one.context.task_name and one.first_drafter is not one.drafter
    first = one._new_draft()
    assert first.context is one.first_context and first.drafter is first.sampler is one.first_drafter
    assert _round(one)["drafted"] == 1
    assert drafts.context_threads and set(drafts.context_threads) == {1}  # every score of the first draft
    drafts.context_threads.clear()
    later = one._new_draft()
    assert later.context is one.context and later.drafter is one.drafter
    later.run()
    assert set(drafts.context_threads) == {2}
    log = (tmp_path / "logs").glob(f"*{logger.name}*")
    assert "Sample-Init-Population summary" in "".join(p.read_text() for p in log)
    same = _stall_search(80, 4, first_draft_threads=2, log=SearchLog())  # the task's own count: no copy
    unset = _stall_search(80, 4, log=SearchLog())
    assert same.first_context is same.context and same.first_drafter is same.drafter
    assert unset.first_context is unset.context and unset.first_drafter is unset.drafter
    for strategy in (one, same, unset):
        strategy.post_tuning()
    with pytest.raises(ValueError, match="first_draft_threads=0 must be >= 1"):
        DraftVerifySearch(draft=PSACostModel(device="a100"), first_draft_threads=0)
    with pytest.raises(ValueError, match="--first-draft-threads 0 must be >= 1"):
        SearchConfig(psa="a100", first_draft_threads=0)
    assert DraftVerifySearch.from_config(SearchConfig(psa="a100", first_draft_threads=4)).first_draft_threads == 4


def test_a_tasks_first_draft_samples_and_evolves_its_own_population():
    """first_draft_population / first_draft_min_samples: the first draft asks for its own population
    of fresh samples (llvm: every sample is valid) and keeps sampling for its own count of valid ones;
    the later drafts have the whole population."""
    half = _stall_search(80, 4, first_draft_population=POPULATION // 2, first_draft_min_samples=5, log=SearchLog())
    whole = _stall_search(80, 4, log=SearchLog())
    assert half.first_drafter is not half.drafter and whole.first_drafter is whole.drafter
    assert half.first_drafter.population_size == POPULATION // 2 and half.first_drafter.init_min_unmeasured == 5
    assert whole.drafter.init_min_unmeasured == 50  # MetaSchedule's init_min_unmeasured
    first = half._new_draft()
    assert first.population_size == first.fresh == POPULATION // 2 and first.sampler is half.first_drafter
    first_half, first_whole = _round(half), _round(whole)
    # one pass of 24 meets 5 valid; 48 valid are under MetaSchedule's 50, so the whole draft samples twice
    assert first_half["samples"] == POPULATION // 2 and first_whole["samples"] == 2 * POPULATION
    assert first_half["draft_scored"] < first_whole["draft_scored"]
    assert len(half._population) <= POPULATION // 2 < len(whole._population)
    later = half._new_draft()  # a re-draft: the whole population, the evolved half reused
    assert later.population_size == POPULATION and later.drafter is half.drafter and later.reused
    for strategy in (half, whole):
        strategy.post_tuning()
    for option in ("first_draft_population", "first_draft_min_samples"):
        with pytest.raises(ValueError, match=f"{option}=0 must be >= 1"):
            DraftVerifySearch(draft=PSACostModel(device="a100"), **{option: 0})
        with pytest.raises(ValueError, match=f"--{option.replace('_', '-')} 0 must be >= 1"):
            SearchConfig(psa="a100", **{option: 0})
    search = DraftVerifySearch.from_config(
        SearchConfig(psa="a100", first_draft_population=256, first_draft_min_samples=25)
    )
    assert (search.first_draft_population, search.first_draft_min_samples) == (256, 25)


def test_a_stalled_task_is_drafted_again():
    """redraft_stall=2: a task whose best has not improved in 2 measured rounds gets a new draft, and
    the count starts again; a failed run is no improvement."""
    strategy = _stall_search(40, 4, redraft_stall=2)
    assert math.isinf(strategy.best_before)
    failed = ms.runner.RunnerResult(None, "a build error")
    drafts = []
    for secs in ([1e-3], [2e-3], None, [5e-4], [4e-4], [6e-4]):
        batch = strategy.generate_measure_candidates()
        drafts.append(strategy._drafts)
        result = ms.runner.RunnerResult(secs, None) if secs else failed
        strategy.notify_runner_results(batch, [result] * len(batch))
    # rounds: improve, stall 1, stall 2 (failed) -> draft before round 4; improve, improve, then stall 1
    assert drafts == [1, 1, 1, 2, 2, 2]
    strategy.post_tuning()


def test_a_stall_draft_waits_while_drafting_is_over_its_share_of_the_run():
    """redraft_share: with the run's drafting far over its share, every stall draft is held and the
    round says so; with a share of the whole run (drafts in turn never take more), each stall drafts. The account is shared by the
    strategy's clones (a run's tasks) and starts afresh for the next run."""
    counts = {}
    for name, share in (("room", 1.0), ("over", 0.15)):
        log = SearchLog()
        strategy = _stall_search(40, 4, redraft_stall=1, redraft_share=share, log=log)
        drafts, held = [], []
        for i in range(5):
            batch = strategy.generate_measure_candidates()
            if i == 0 and name == "over":
                strategy.ledger.note(1e6)  # as if the run had drafted for 11 days already
            drafts.append(strategy._drafts)
            held.append(log.searched(strategy.task_name).get("draft_held", 0))
            strategy.notify_runner_results(batch, [ms.runner.RunnerResult([1e-3], None)] * len(batch))
        counts[name] = (drafts, held)
        assert strategy.ledger.drafted_s > (1e6 if name == "over" else 0.0)  # every draft's own seconds
        strategy.post_tuning()
    # round 1 sets the best; from round 2 on, every round is a stall: a draft is due before rounds 3-5
    assert counts["room"] == ([1, 1, 2, 3, 4], [0, 0, 0, 0, 0])
    assert counts["over"] == ([1, 1, 1, 1, 1], [0, 0, 1, 1, 1])
    # a clone (the next run's task) keeps its account in the same ledger, which starts afresh
    again = strategy.clone()
    again.pre_tuning(8, 4, context_for(matmul(), again).generate_design_space(), ms.database.MemoryDatabase(),
                     ms.cost_model.RandomModel())  # fmt: skip
    assert strategy.ledger.drafted_s == 0.0
    again.generate_measure_candidates()
    assert 0.0 < strategy.ledger.drafted_s < 1e6  # its first draft
    again.post_tuning()
    assert DraftVerifySearch(draft=PSACostModel(device="a100")).redraft_share == 0.15  # the default
    assert DraftVerifySearch.from_config(SearchConfig(psa="a100")).redraft_share == 0.15
    # the next draft is reckoned to last as long as the last: 10 s drafted + 5 s within 15% of 100 + 5 s
    assert share_allows(10.0, 100.0, 5.0, 0.15) and not share_allows(10.0, 50.0, 5.0, 0.15)
    assert share_allows(1e9, 1.0, 1.0, None)
    with pytest.raises(ValueError, match="redraft_share=0"):
        DraftVerifySearch(draft=PSACostModel(device="a100"), redraft_share=0)
    with pytest.raises(ValueError, match="--redraft-share 1.5"):
        SearchConfig(psa="a100", redraft_share=1.5)
    assert DraftVerifySearch.from_config(SearchConfig(psa="a100", redraft_share=None)).redraft_share is None


def _low_space_search(**options):
    """A draft-then-verify search on the matmul, rounds of 4, no stall drafts, whose first draft has
    run (in turn): the potential space (48) is low under 24, and it can fill a batch down to 4."""
    strategy = _stall_search(80, 4, redraft_below=0.5, redraft_stall=0, log=SearchLog(), **options)
    _round(strategy)
    return strategy


def _round(strategy, keep: int | None = None) -> dict:
    """One measured round, the potential space first cut to its first `keep`; the round's search stats."""
    if keep is not None:
        strategy._potential = strategy._potential[:keep]
    batch = strategy.generate_measure_candidates()
    stats = strategy.log.searched(strategy.task_name)
    strategy.notify_runner_results(batch, [ms.runner.RunnerResult([1e-3], None)] * len(batch))
    return stats


def test_a_low_space_is_drafted_for_alongside_and_taken_up_once_done(monkeypatch):
    """low_draft_ahead: a potential space under redraft_below that still fills the batch starts a draft
    alongside, and the rounds go on with the space they have until it is done; then a round takes it
    up without waiting. A space that can no longer fill a batch waits for it. Under a drafting share
    such a draft is held, until the space cannot fill a batch and drafts in turn; without
    low_draft_ahead a low space drafts in turn at once."""
    gate = threading.Event()
    run = Draft.run
    monkeypatch.setattr(Draft, "run", lambda self: gate.wait(60) and run(self))
    gate.set()
    strategy = _low_space_search(draft_ahead=True)
    assert strategy._drafts == 1 and len(strategy._potential) >= 24
    gate.clear()  # drafts from here on wait for the gate
    started = _round(strategy, keep=12)
    assert started.get("draft_started") == 1 and started["drafted"] == 0
    going_on = _round(strategy)  # the draft is not done: this round picks from what is left
    assert going_on["drafted"] == 0 and not going_on.get("draft_started") and not going_on.get("draft_held")
    assert strategy._background is not None and strategy._drafts == 1
    gate.set()
    while not strategy._background.done():
        time.sleep(0.01)
    taken = _round(strategy)
    assert taken["drafted"] == 1 and taken["draft_wait_s"] < 1.0 and strategy._drafts == 2
    assert strategy._background is None and len(strategy._potential) >= 24
    # a space that cannot fill the batch waits for the draft running alongside
    gate.clear()
    assert _round(strategy, keep=12).get("draft_started") == 1
    timer = threading.Timer(0.5, gate.set)
    timer.start()
    waited = _round(strategy, keep=2)
    timer.join()
    assert waited["drafted"] == 1 and waited["draft_wait_s"] >= 0.3 and strategy._drafts == 3
    strategy.post_tuning()

    # under a share the run's drafting is far over, the low space's draft is held until it cannot fill a batch
    held = _low_space_search(draft_ahead=True, redraft_share=0.15)
    held.ledger.note(1e6)
    first = _round(held, keep=12)
    assert first.get("draft_held") == 1 and not first.get("draft_started") and held._drafts == 1
    dry = _round(held, keep=2)
    assert dry["drafted"] == 1 and math.isnan(dry.get("draft_wait_s", math.nan)) and held._drafts == 2
    held.post_tuning()

    # without low_draft_ahead (the default before 2026-11-28) a low space drafts in turn, share or not
    before = _low_space_search(draft_ahead=True, low_draft_ahead=False, redraft_share=0.15)
    before.ledger.note(1e6)
    low = _round(before, keep=12)
    assert low["drafted"] == 1 and not low.get("draft_started") and before._drafts == 2
    before.post_tuning()
    assert DraftVerifySearch(draft=PSACostModel(device="a100")).low_draft_ahead is True  # the default
    assert DraftVerifySearch.from_config(SearchConfig(psa="a100")).low_draft_ahead is True
    assert DraftVerifySearch.from_config(SearchConfig(psa="a100", low_draft_ahead=False)).low_draft_ahead is False


def test_bad_options_are_refused():
    psa = PSACostModel(device="a100")
    with pytest.raises(ValueError, match="potential_size=600 must be <= population_size=512"):
        DraftVerifySearch(draft=psa, population_size=512, potential_size=600)
    with pytest.raises(ValueError, match="eps_greedy=1.5"):
        DraftVerifySearch(draft=psa, eps_greedy=1.5)
    with pytest.raises(ValueError, match="redraft_every=-1"):
        DraftVerifySearch(draft=psa, redraft_every=-1)
    with pytest.raises(ValueError, match="redraft_stall=-2"):
        DraftVerifySearch(draft=psa, redraft_stall=-2)
    with pytest.raises(ValueError, match="verify_pool=0"):
        DraftVerifySearch(draft=psa, verify_pool=0)
    with pytest.raises(ValueError, match="resample_ratio=2"):
        DraftVerifySearch(draft=psa, resample_ratio=2)
    with pytest.raises(ValueError, match="fill_device=-4"):
        DraftVerifySearch(draft=psa, fill_device=-4)
    with pytest.raises(ValueError, match="--fill-device -4"):
        SearchConfig(psa="a100", fill_device=-4)
    assert DraftVerifySearch.from_config(SearchConfig(psa="a100", fill_device=48)).fill_device == 48
    with pytest.raises(ValueError, match="redraft_min_samples=0 must be >= 1"):
        DraftVerifySearch(draft=psa, redraft_min_samples=0)
    with pytest.raises(ValueError, match="--redraft-min-samples 0"):
        SearchConfig(psa="a100", redraft_min_samples=0)
    assert DraftVerifySearch.from_config(SearchConfig(psa="a100", redraft_min_samples=8)).redraft_min_samples == 8
    with pytest.raises(ValueError, match="--psa-weight -1"):
        SearchConfig(psa="a100", psa_weight=-1.0)
    # tune.py's knob reaches the search
    assert DraftVerifySearch.from_config(SearchConfig(psa="a100", psa_weight=0.5)).psa_weight == 0.5


def test_malformed_curve_file_names_the_line(tmp_path):
    path = tmp_path / "curve.csv"
    path.write_text(
        ",".join(SearchLog.FIELDS) + "\n" + ",".join(["t"] + ["1"] * (len(SearchLog.FIELDS) - 1)) + "\n" + "t,x\n"
    )
    with pytest.raises(ValueError, match=f"{path}:3: malformed"):
        read_rounds(path)
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="not a tuning-curve CSV"):
        read_rounds(tmp_path / "other.csv")
    assert read_rounds(tmp_path / "missing.csv") == []


@derived_object
class Sleepy(ms.cost_model.PyCostModel):
    """Scores candidates by their position, taking 20 ms a call."""

    def predict(self, context, candidates):
        time.sleep(0.02)
        return np.arange(len(candidates), dtype=np.float64)


def test_counting_model_counts_and_times_only_real_scoring():
    strategy = DraftVerifySearch(
        draft=PSACostModel(device="a100"), population_size=POPULATION, potential_size=POTENTIAL
    )
    context = context_for(matmul(), strategy)
    strategy.pre_tuning(
        8, 4, context.generate_design_space(), ms.database.MemoryDatabase(), ms.cost_model.RandomModel()
    )
    picks = strategy.generate_measure_candidates()
    assert strategy.draft_model.scored >= POPULATION and strategy.draft_model.seconds > 0

    cached = CountingCostModel(model=Sleepy())
    first = cached.predict(context, picks)
    again = cached.predict(context, picks[::-1])  # remembered: no second call
    assert cached.scored == len(picks) and 0.02 <= cached.seconds < 1.0
    np.testing.assert_array_equal(again, first[::-1])
    plain = CountingCostModel(model=Sleepy(), cache=False)
    plain.predict(context, picks)
    plain.predict(context, picks)
    assert plain.scored == 2 * len(picks) and plain.seconds >= 0.04


def test_with_backoff_a_fruitless_stall_redraft_doubles_the_next_wait():
    """redraft_stall=1 with backoff: drafts after 1, then 2, then 4 rounds without a new best; a new
    best brings the wait back to 1."""
    strategy = _stall_search(80, 2, redraft_stall=1, redraft_backoff=True)
    drafts = []
    for secs in [1e-3] + [2e-3] * 8 + [5e-4, 6e-4]:
        batch = strategy.generate_measure_candidates()
        drafts.append(strategy._drafts)
        strategy.notify_runner_results(batch, [ms.runner.RunnerResult([secs], None)] * len(batch))
    # round 1 sets the best; stalls after it: a draft before round 3 (1 stall), round 5 (2 more),
    # round 9 (4 more); round 10's new best resets the wait, so round 11 (after 1 stall) drafts
    batch = strategy.generate_measure_candidates()
    drafts.append(strategy._drafts)
    assert drafts == [1, 1, 2, 2, 3, 3, 3, 3, 4, 4, 4, 5], drafts
    strategy.post_tuning()


def test_psa_weight_ranks_the_potential_space_by_the_blend(tmp_path, checkpoints):
    """With psa_weight, the picks are the top of z(PAM) + w z(log PSA) over the potential space;
    a large weight PSA's top (PAM breaks its ties). A cold verifier passes through (the cold start)."""
    from bridge.export import export_checkpoint
    from pruner_models.blend import blend_with_psa

    psa = PSACostModel(device="a100")
    artifact = export_checkpoint(checkpoints["PAMModule"], tmp_path / "pam.pt").path
    pretrained = PrunerCostModel(mode="pam-no-update", artifact=artifact, device="cpu")
    tops = {}
    for weight in (0.0, 1.0, 100.0):
        strategy = DraftVerifySearch(
            draft=psa, population_size=POPULATION, potential_size=POTENTIAL, verify_generations=0, psa_weight=weight
        )
        context = context_for(matmul(), strategy, seed=1)
        strategy.pre_tuning(8, 4, context.generate_design_space(), ms.database.MemoryDatabase(), pretrained)
        picks = strategy.generate_measure_candidates()
        rest = unpicked(strategy.potential, picks)
        assert len(picks) == 4 and len(rest) == POTENTIAL - 4
        both = [*picks, *rest]
        blend = blend_with_psa(pretrained.predict(context, both), psa.predict(context, both), None, weight)
        assert blend[:4].min() >= blend[4:].max(), weight
        tops[weight] = {key(c.sch) for c in picks}
        strategy.post_tuning()
    assert tops[0.0] != tops[100.0]  # PAM's and PSA's tops differ here, so the weight decides

    cold = CountingCostModel(model=PrunerCostModel(mode="pam", device="cpu"), blend_with=psa, blend_weight=1.0)
    assert (cold.predict(context, both) == 1.0).all()  # untrained: all equal, passed through
    warm = CountingCostModel(model=pretrained, blend_with=psa, blend_weight=1.0).predict(context, both)
    assert (warm > 0).all() and list(np.argsort(-warm)) == list(
        np.argsort(-blend_with_psa(pretrained.predict(context, both), psa.predict(context, both), None, 1.0))
    )
    with pytest.raises(ValueError, match="psa_weight"):
        DraftVerifySearch(draft=psa, psa_weight=-1.0)
    with pytest.raises(ValueError, match="blend_weight"):
        CountingCostModel(model=pretrained, blend_with=psa, blend_weight=float("nan"))


def test_a_record_that_no_longer_replays_is_left_out_of_the_measured_set(measured_matmul, measured_database, caplog):
    """A resumed run replays its database's records for the schedules not to measure again: a record
    whose trace does not apply to its workload (here a matmul's, on a one-block elementwise op) is
    left out with a warning, as `catch_up` leaves it out, instead of failing the run's start."""
    candidates = measured_matmul[1]
    records = measured_database.get_all_tuning_records()
    a = te.placeholder((8,), name="A")
    other = tvm.IRModule({"main": te.create_prim_func([a, te.compute((8,), lambda i: a[i] * 2, name="other")])})
    workload = ms.database.MemoryDatabase().commit_workload(other)
    r = records[0]
    stale = ms.database.TuningRecord(r.trace, workload, r.run_secs, r.target, r.args_info)
    assert _measured_keys([stale, *records], 2) == {key(c.sch) for c in candidates}
    assert f"1 of {len(records) + 1} database records no longer replay" in caplog.text


def test_the_best_measured_schedules_come_from_the_database_once_then_from_the_runs_own_results(
    measured_matmul, measured_database, monkeypatch
):
    """A draft's parents and the verifier's pool include the task's best measured schedules; they were
    replayed from the database every round (1.3 s of a 7.3 s verify of the 3x3 conv on the host), then
    once more after `pre_tuning`'s replay of all of them; now they are what `pre_tuning` replayed."""
    context0, candidates, results = measured_matmul
    database = measured_database
    workload = database.commit_workload(context0.mod)
    strategy = DraftVerifySearch(
        draft=PSACostModel(device="a100"), population_size=POPULATION, potential_size=POTENTIAL
    )
    context = context_for(context0.mod, strategy)
    strategy.pre_tuning(64, 4, context.generate_design_space(), database, ms.cost_model.RandomModel(seed=0))
    assert strategy.measured == {key(c.sch) for c in candidates}  # replayed on the context's 2 threads
    records = database.get_all_tuning_records()
    assert _measured_keys(records, 1) == _measured_keys(records, 2) == strategy.measured
    top = [key(r.as_measure_candidate().sch) for r in database.get_top_k(workload, 5)]
    kept = strategy.best_replayed  # pre_tuning kept the fastest of what it replayed for the measured set
    assert len(kept) == min(strategy._best_kept, len(records)) and [key(s) for _, s in kept[:5]] == top
    assert [t for t, _ in kept] == sorted(t for t, _ in kept)
    strategy.database = ms.database.MemoryDatabase()  # neither read nor replayed again from here on
    with monkeypatch.context() as mp:
        for module in (bridge.search, data.replay):
            mp.setattr(module, "replay_records", lambda *a: pytest.fail("replayed again"))
        assert [key(s) for s in strategy._best_measured(5)] == top  # the earlier run's best, fastest first
        assert [key(s) for s in strategy._best_measured(5)] == top
    batch = strategy.generate_measure_candidates()
    fastest = min(np.mean([float(t) for t in r.run_secs]) for r in results)
    secs = [[fastest / (i + 2)] for i in range(len(batch) - 1)] + [[1.0]]  # all but the last beat the records
    strategy.notify_runner_results(batch, [ms.runner.RunnerResult(s, None) for s in secs])
    mine = [key(c.sch) for c in batch]
    assert [key(s) for s in strategy._best_measured(len(batch) + 1)] == [*mine[:-1][::-1], *top[:2]]
    strategy.post_tuning()
