"""A draft run alongside the tuning loop (`bridge.drafting`, `SearchConfig.draft_ahead`): the same draft
as in turn, taken up by a later round, on real llvm tuning.

Over 400 lines: drafts alongside, first drafts ahead and first verifies ahead are one mechanism (a
draft on a thread of its own, taken up by a round), tested here on the same real runs."""

import json
import math
import os
import sys
import threading
import time

import psutil
import pytest

from bridge.config import CostModelConfig, MeasureConfig, SearchConfig, TuneConfig
from bridge.curve import drafting_share, drafting_wall_share
from bridge.draft_verify import DraftVerifySearch
from bridge.drafting import Draft
from bridge.psa import PSACostModel
from bridge.span_union import SpanUnion
from bridge.tuning import tune_tasks
from bridge.workers import start_workers
from data import zoo
from tests.bridge.test_search import context_for, matmul
from tests.tvm_env.test_builder import alive
from tvm_env import ms, tvm_ffi

TARGET = {"kind": "llvm", "mcpu": "native", "num-cores": 2}


def _strategy(seed: int, **options) -> DraftVerifySearch:
    """A strategy set up on a task whose MetaSchedule sampling runs on one thread: with more, which
    thread (and random stream) samples which schedule varies from run to run."""
    strategy = DraftVerifySearch(draft=PSACostModel(device="a100"), population_size=48, potential_size=12, **options)
    context = context_for(matmul(), strategy, seed=seed, threads=1)
    strategy.pre_tuning(
        8, 4, context.generate_design_space(), ms.database.MemoryDatabase(), ms.cost_model.RandomModel()
    )
    return strategy


def test_a_draft_alongside_gives_what_the_same_draft_in_turn_gives():
    inline, alongside = _strategy(seed=3), _strategy(seed=3)
    first = inline._new_draft().run()
    background = alongside._new_draft()
    background.start()
    second, waited = background.result()
    assert waited >= 0.0 and len(first.evolved) == 48
    assert [k for k, _ in first.evolved] == [k for k, _ in second.evolved]
    assert [k for k, _ in first.samples] == [k for k, _ in second.samples]
    assert all(k == int(tvm_ffi.structural_hash(s.mod)) for k, s in second.evolved)  # hashed in the draft's thread
    assert second.stats["draft_scored"] > 0 and second.stats["samples"] == len(second.samples)
    # the next draft of each, from its evolved population, agrees too
    for strategy, result in ((inline, first), (alongside, second)):
        strategy._take(result)
    assert [k for k, _ in inline._new_draft().run().evolved] == [k for k, _ in alongside._new_draft().run().evolved]


def test_a_redraft_samples_until_its_own_minimum_is_valid():
    """MetaSchedule samples again until `init_min_unmeasured` schedules are valid: the first draft keeps
    its 50, a re-draft (12 of 48 asked afresh here) `redraft_min_samples`."""
    counts = {}
    for minimum in (1, 30):
        strategy = _strategy(seed=5, redraft_min_samples=minimum)
        first = strategy._new_draft().run()
        assert first.stats["samples_asked"] == 48 and first.stats["samples"] >= 50  # two passes at least
        strategy._take(first)
        again = strategy._new_draft().run()
        assert again.stats["samples_asked"] == 12
        counts[minimum] = again.stats["samples"]
        assert strategy.resampler is not strategy.drafter
        strategy._finish()
    assert 1 <= counts[1] <= 12 < 30 <= counts[30], counts  # one pass; passes until 30 were valid
    assert _strategy(seed=5).redraft_min_samples == 8  # the default
    same = _strategy(seed=5, redraft_min_samples=50)
    assert same.resampler is same.drafter  # 50, as the first draft: one inner search does both
    same._finish()


def _nice_of_threads() -> dict[int, int]:
    """This process's threads and their nice values, from /proc (field 19 of a thread's stat)."""
    values = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                values[int(tid)] = int(f.read().rsplit(")", 1)[1].split()[16])
        except OSError:  # the thread ended meanwhile
            continue
    return values


@pytest.mark.skipif(sys.platform != "linux", reason="a thread's own nice value is Linux's")
def test_a_draft_alongside_runs_at_a_lower_cpu_priority_and_so_do_the_threads_tvm_starts_from_it():
    """`draft_nice`: the draft's thread, and the threads MetaSchedule's C++ sampling and evolution start
    from it (a context of two threads), run at the raised nice value; the threads that were there
    before, and the draft's `then` (a first verify, which holds locks the loop waits on), do not."""
    base = os.getpriority(os.PRIO_PROCESS, 0)
    if base + 5 > 19:
        pytest.skip(f"the tests run at nice {base}: no room to lower a thread's priority by 5")
    strategy = DraftVerifySearch(draft=PSACostModel(device="a100"), population_size=48, potential_size=12, draft_nice=5)
    context = context_for(matmul(), strategy, seed=3, threads=2)
    strategy.pre_tuning(
        8, 4, context.generate_design_space(), ms.database.MemoryDatabase(), ms.cost_model.RandomModel()
    )
    before = _nice_of_threads()
    seen, done = {}, threading.Event()

    def watch() -> None:  # the threads alive while the draft runs, and their nice values
        while not done.is_set():
            seen.update(_nice_of_threads())
            time.sleep(0.001)

    watcher = threading.Thread(target=watch)
    watcher.start()
    draft = strategy._new_draft(then=lambda _: os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
    assert draft.nice == 5
    draft.start()
    result, _ = draft.result()
    done.set()
    watcher.join()
    assert result.ranking == base and len(result.evolved) == 48  # `then` at the usual priority
    niced = [tid for tid, value in seen.items() if value == base + 5]
    assert len(niced) >= 2, seen  # the draft's thread and at least one that TVM started from it
    assert all(seen.get(tid, value) == value == base for tid, value in before.items())  # the others: untouched
    strategy._finish()
    # the same draft as at the usual priority (one sampling thread each, so that the draws agree)
    niced, plain = _strategy(seed=3, draft_nice=5), _strategy(seed=3)
    assert plain.draft_nice == 0
    evolved = []
    for s in (niced, plain):
        draft = s._new_draft()
        draft.start()
        evolved.append([k for k, _ in draft.result()[0].evolved])
        s._finish()
    assert evolved[0] == evolved[1] and len(evolved[0]) == 48
    with pytest.raises(ValueError, match="draft_nice"):
        DraftVerifySearch(draft=PSACostModel(device="a100"), draft_nice=-1)
    with pytest.raises(ValueError, match="draft_nice"):
        DraftVerifySearch(draft=PSACostModel(device="a100"), draft_nice=20)
    with pytest.raises(ValueError, match="--draft-nice"):
        SearchConfig(draft_nice=20)


def test_stall_drafts_run_alongside_and_a_later_round_takes_them_up(request, tmp_path, builder, runner):
    """With redraft_stall 1 a task re-drafts whenever a round found nothing better: each such draft
    starts in one round's search and gives the batch of the first round after it that finds it
    done; nothing is measured twice. The
    run walks the TIR on a pool started before it (`start_workers`, as tune.py does while it
    extracts the tasks: on the H100 machine the first draft waited 8-10 s for a pool started with
    the run), and a second run walks on the same processes. (Both runs build on the module's
    builder and measure on its runner, whose processes start once.)"""
    _, pool = start_workers(TARGET, MeasureConfig(), walk=True, build=False)
    request.addfinalizer(pool.close)  # its processes end with the test
    pool.workers, pool.min_batch = 2, 8  # this machine has too few cores for a pool by default
    pool.warm().join()
    started = {tid: worker._proc.pid for tid, worker in pool._pool._worker_map.items()}
    assert len(started) == 2
    walked = []
    walk = pool.walk
    pool.walk = lambda mods, *args: walked.append(len(mods)) or walk(mods, *args)

    def tune(out: str, trials: int):
        return tune_tasks(
            [zoo.operator_task("matmul:64,64,64")],
            json.loads(json.dumps(TARGET)),
            TuneConfig(out=str(tmp_path / out), trials=trials, trials_per_round=4),
            cost_model=CostModelConfig(name="pam", epochs=3),
            # rounds of 4 (fill_device 0): ten rounds give a stall; batches grown to fill the device gave
            # six rounds here, and once in CI each of them found a new best, so no draft was started
            search=SearchConfig(
                psa="a100",
                population=48,
                potential=48,
                redraft_stall=1,
                draft_ahead=True,
                fill_device=0,
                redraft_share=None,  # a test run is far too short for stall drafts within a share
                first_drafts_ahead=0,  # the first draft in turn (k > 0: the next test)
            ),
            measure=MeasureConfig(number=2, min_repeat_ms=5),
            builder=builder,
            runner=runner,
            walk_pool=pool,
            progress=False,
        )

    result = tune("a", 40)
    rows = result.rows
    started_drafts = [i for i, r in enumerate(rows) if r.get("draft_started") == 1]
    assert started_drafts, [
        (r["best_us"], r["drafted"], r["draft_started"]) for r in rows
    ]  # 10 rounds of a 64^3 matmul stall
    for i in started_drafts:
        assert not rows[i]["drafted"]  # that round verified the space it had
        # a later round takes the draft up, once it is done (`low_draft_ahead`); the rounds between
        # verify the space they have and start no other draft
        later = next((j for j in range(i + 1, len(rows)) if rows[j]["drafted"] == 1), None)
        between = rows[i + 1 : later if later is not None else len(rows)]
        assert all(not r["drafted"] and r.get("draft_started") != 1 for r in between)
        if later is not None:
            taken = rows[later]
            assert taken["draft_wait_s"] >= 0.0 and taken["draft_scored"] > 0
            assert taken["draft_s"] >= taken["draft_wait_s"]
    assert rows[0]["drafted"] == 1 and math.isnan(rows[0]["draft_wait_s"])  # the first draft runs in turn
    records = result.database.get_all_tuning_records()
    assert len(records) == 40
    assert len({int(tvm_ffi.structural_hash(r.as_measure_candidate().sch.mod)) for r in records}) == 40
    before = len(walked)
    assert before > 0 and sum(walked) >= 8  # the drafts walked on the pool
    tune("b", 4)
    assert len(walked) > before  # so did the second run's, on the processes started before the first
    assert pool._pool._worker_map and {t: w._proc.pid for t, w in pool._pool._worker_map.items()} == started


def test_first_drafts_start_with_the_run_at_most_k_at_once(tmp_path, monkeypatch):
    """`first_drafts_ahead` 2 on a run of three tasks: every task's first draft starts at the run's
    start (MetaSchedule's `pre_tuning` of each task comes before any round), at most two at once, on
    the host's two cores shared (one thread each, `first_draft_threads` unset), and each task's first
    round takes its draft up; nothing is measured twice."""
    spans = []  # (start, end) of every first draft, on whatever thread ran it
    threads = []  # the threads of the context each first draft ran on
    run = Draft.run

    def timed(self):
        start = time.perf_counter()
        try:
            return run(self)
        finally:
            if self.sampler is self.drafter:  # a first draft (re-drafts sample on the resampler)
                spans.append((start, time.perf_counter()))
                threads.append(int(self.context.num_threads))

    monkeypatch.setattr(Draft, "run", timed)
    tasks = [zoo.operator_task(spec) for spec in ("matmul:64,64,64", "matmul:32,64,32", "dense:1,64,64")]
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    began = time.perf_counter()
    result = tune_tasks(
        tasks,
        json.loads(json.dumps(TARGET)),
        TuneConfig(out=str(tmp_path / "run"), trials=12, trials_per_round=4),  # each task's first round
        cost_model=CostModelConfig(name="pam", epochs=2),
        search=SearchConfig(psa="a100", population=48, potential=48, fill_device=0, first_drafts_ahead=2),
        measure=MeasureConfig(number=2, min_repeat_ms=5, workers=2),
        progress=False,
    )
    # the build and run workers the run started (no builder or runner was passed) ended with it
    assert alive(p.pid for p in psutil.Process().children(recursive=True) if p.pid not in before) == []
    first = {}
    for row in result.rows:
        first.setdefault(row["task"], row)
    assert len(first) == 3
    for row in first.values():  # taken up from the background: its wait is logged (in turn: NaN)
        assert row["drafted"] == 1 and math.isfinite(row["draft_wait_s"]) and row["draft_scored"] > 0
    assert len(spans) == 3 and threads == [1, 1, 1]  # the tasks' own contexts have 2
    logs = sorted((tmp_path / "run" / "logs").glob("*task_[0-9]*.log"))
    assert len(logs) == 3
    for log in logs:  # each first draft, on a context of its own, logged to its task's file
        assert "Sample-Init-Population summary" in log.read_text(), log.name
    firsts = sorted(spans)
    assert firsts[1][0] < firsts[0][1] and firsts[0][0] - began < 30  # two at once, from the run's start
    overlap = max(sum(s <= t < e for s, e in spans) for t, _ in spans)
    assert overlap == 2, spans  # never three at once
    # the run's drafting on the wall: the union of the drafts' own spans (two at once counted once)
    union = SpanUnion()
    for start, end in spans:
        union.add(start, end)
    assert result.rows[-1]["draft_wall_s"] == pytest.approx(union.seconds, abs=0.05)
    assert union.seconds < sum(e - s for s, e in spans) - 0.5  # they overlapped
    walls = [row["draft_wall_s"] for row in result.rows]
    assert walls == sorted(walls) and walls[0] > 0  # it grows as the rounds take their drafts up
    assert drafting_wall_share(result.rows) < drafting_share(result.rows)
    records = result.database.get_all_tuning_records()
    keys = [
        (int(tvm_ffi.structural_hash(r.workload.mod)), int(tvm_ffi.structural_hash(r.as_measure_candidate().sch.mod)))
        for r in records
    ]
    assert len(keys) == len(set(keys)) and len(records) >= 12


def _first_verify_search(verify, pipeline, log, trials: int, *, ahead: bool, mod=None, population=48, **options):
    """A draft-then-verify search on the matmul (or `mod`) whose first draft starts at `pre_tuning`
    (`ahead`: its thread also ranks it by `verify`), a potential space of 12 and batches of 4, tuning
    started with `trials`; (search, context)."""
    strategy = DraftVerifySearch(
        draft=PSACostModel(device="a100"),
        population_size=population,
        potential_size=12,
        local_share=0.0,
        eps_greedy=0.0,
        first_drafts_ahead=1,
        first_verify_ahead=ahead,
        pipeline=pipeline,
        log=log,
        **options,
    )
    context = context_for(matmul() if mod is None else mod, strategy, seed=3, threads=1)
    strategy.pre_tuning(trials, 4, context.generate_design_space(), ms.database.MemoryDatabase(), verify)
    return strategy, context


def test_a_first_verify_ahead_runs_on_the_drafts_thread_and_is_the_first_batch(tmp_path, checkpoints):
    """`first_verify_ahead`: with the first draft started at `pre_tuning`, its thread also ranks the draft by
    a pretrained verifier, and the first round takes that ranking up; without, the round ranks it. The
    same draft and verifier give the same first batch either way (no verifier generations here, so no
    randomness of their own), and the round's log counts the verify that ran ahead. With a generation
    of the verifier, its inner search is made in `pre_tuning`'s thread and evolves on the draft's."""
    from bridge.cost_model import PrunerCostModel
    from bridge.export import export_checkpoint
    from bridge.pipeline import Pipeline
    from bridge.search_log import SearchLog
    from tests.bridge.test_search import Tally, unpicked

    artifact = export_checkpoint(checkpoints["PAMModule"], tmp_path / "pam.pt").path
    batches, threads, logs = {}, {}, {}
    for ahead, generations in ((True, 0), (False, 0), (True, 1)):
        verify = Tally(PrunerCostModel(mode="pam-no-update", artifact=artifact, device="cpu"))
        pipeline = Pipeline()
        log = logs[ahead, generations] = SearchLog()
        strategy, context = _first_verify_search(
            verify, pipeline, log, 8, ahead=ahead, verify_generations=generations, verify_pool=8
        )
        picks = strategy.generate_measure_candidates()
        batches[ahead, generations] = [int(tvm_ffi.structural_hash(c.sch.mod)) for c in picks]
        threads[ahead, generations] = list(verify.threads)
        rest = unpicked(strategy.potential, picks)
        assert len(picks) == 4
        if generations == 0:  # the verifier's top of the potential space
            assert verify.model.predict(context, picks).min() >= verify.model.predict(context, rest).max()
        strategy.post_tuning()
        pipeline.close()
    assert batches[True, 0] == batches[False, 0]
    assert threads[True, 0][0].startswith("pruner-draft") and not threads[False, 0][0].startswith("pruner-draft")
    # the space's ranking and the evolution's first scoring (the next batch's search, on the pipeline's
    # thread, may have scored too by now)
    assert all(name.startswith("pruner-draft") for name in threads[True, 1][:2])
    for (_, generations), log in logs.items():  # the first search's stats: the verify ahead as the round's
        first = log.searched("task")
        assert first["cold_start"] == 0 and first["verifier_s"] > 0.0
        assert first["verify_scored"] == 12 if generations == 0 else first["verify_scored"] > 12
    with pytest.raises(ValueError):
        DraftVerifySearch(draft=PSACostModel(device="a100"), first_drafts_ahead=-1)
    assert DraftVerifySearch.from_config(SearchConfig(psa="a100", first_verify_ahead=False)).first_verify_ahead is False


def test_a_first_verify_ahead_evolves_a_first_space_smaller_than_its_pool(tmp_path, checkpoints):
    """A first draft of 8 schedules (`first_draft_population`) under a verify pool of 32 and a potential
    space of 12: the verifier's first generation is made for the 8 the space can hold, and runs ahead on
    the draft's thread, not the loop's; the space is low only under half of its 8, not of 12, until a
    re-draft of the whole population."""
    from bridge.cost_model import PrunerCostModel
    from bridge.export import export_checkpoint
    from bridge.pipeline import Pipeline
    from bridge.search_log import SearchLog
    from tests.bridge.test_search import Tally

    artifact = export_checkpoint(checkpoints["PAMModule"], tmp_path / "pam.pt").path
    verify = Tally(PrunerCostModel(mode="pam-no-update", artifact=artifact, device="cpu"))
    pipeline = Pipeline()
    strategy, _ = _first_verify_search(
        verify, pipeline, SearchLog(), 8, ahead=True, verify_generations=1, verify_pool=32, first_draft_population=8
    )
    picks = strategy.generate_measure_candidates()
    strategy._join()  # the next batch's search ahead, which trims the space, is done
    assert len(picks) == 4 and verify.threads and all(name.startswith("pruner-draft") for name in verify.threads[:2])
    # on the draft's thread: the space's 8 ranked, then one generation of a verifier of 8 (not of the pool's 32)
    assert verify.sizes[0] == 8 and 0 < verify.sizes[1] <= 8
    strategy._potential = strategy._potential[:4]
    assert strategy._space_cap == 8 and strategy._draft_needed(4) == (False, False)  # 4 left of 8: not low
    strategy._potential = strategy._potential[:3]
    assert strategy._draft_needed(2) == (False, True)  # 3 of 8: under half, a draft alongside
    strategy._take(strategy._new_draft().run())  # a re-draft of the whole population
    strategy._potential = strategy._potential[:5]
    assert strategy._space_cap == 12 and strategy._draft_needed(2) == (False, True)  # 5 of 12: under half
    strategy.post_tuning()
    pipeline.close()


@pytest.mark.parametrize("ahead", [True, False])
def test_a_tasks_first_verify_has_its_own_generations(tmp_path, checkpoints, ahead):
    """`first_verify_generations`: a pretrained verifier's first verify (ahead on the draft's thread, or in
    the first round) only ranks the potential space with 0, and the later verifies evolve
    `verify_generations` more, scoring their children too."""
    from bridge.cost_model import PrunerCostModel
    from bridge.export import export_checkpoint
    from bridge.pipeline import Pipeline
    from bridge.search_log import SearchLog
    from tests.bridge.test_search import Tally

    artifact = export_checkpoint(checkpoints["PAMModule"], tmp_path / "pam.pt").path
    verify = Tally(PrunerCostModel(mode="pam-no-update", artifact=artifact, device="cpu"))
    pipeline, log = Pipeline(), SearchLog()
    strategy, _ = _first_verify_search(
        verify, pipeline, log, 16, ahead=ahead, verify_generations=1, first_verify_generations=0, verify_pool=4
    )
    scored = []
    try:
        for _ in range(2):
            picks = strategy.generate_measure_candidates()
            assert len(picks) == 4
            left = len(strategy.potential)
            scored.append(log.searched("task")["verify_scored"])
            strategy.notify_runner_results(picks, [ms.runner.RunnerResult([1e-3], None)] * len(picks))
    finally:
        strategy.post_tuning()
        pipeline.close()
    assert scored[0] == 12  # the first draft's potential space, ranked: no children
    assert scored[1] > left + 4  # the space again, and one generation's children
    with pytest.raises(ValueError, match="first_verify_generations"):
        DraftVerifySearch(draft=PSACostModel(device="a100"), first_verify_generations=-1)
    config = SearchConfig(psa="a100", first_verify_generations=0)
    assert DraftVerifySearch.from_config(config).first_verify_generations == 0


def test_a_draft_keeps_each_sampled_module_once_and_a_batch_holds_no_schedule_twice():
    """On a task with few real choices many random samples lower to one module: MetaSchedule's
    sampling of a small softmax for an H100 gave 256 schedules of 134 modules. A draft keeps each
    module once, so the random share of a batch cannot pick one schedule twice (the prefetch of such
    a batch raised a KeyError on BERT-base's softmax and layer norms on the GPU machine)."""
    from tvm_env import parse_target, setup, task_context

    target = parse_target("nvidia/nvidia-h100")
    setup(target)
    strategy = DraftVerifySearch(
        draft=PSACostModel(device="h100"), population_size=128, potential_size=48, eps_greedy=1.0
    )
    context = task_context(zoo.operator_task("softmax:4,8").mod, target, strategy, "softmax", threads=1, seed=0)
    strategy.pre_tuning(
        64, 16, context.generate_design_space(), ms.database.MemoryDatabase(), ms.cost_model.RandomModel()
    )
    try:
        result = strategy._new_draft().run()
        keys = [k for k, _ in result.samples]
        assert len(keys) == len(set(keys)) and result.stats["samples"] > len(keys), result.stats
        strategy._take(result)
        picks, _ = strategy._search(16)  # all 16 at random from the samples (eps_greedy 1)
        assert len(picks) == 16 and len({int(tvm_ffi.structural_hash(s.mod)) for s in picks}) == 16
        drafts = strategy._drafts
        strategy._samples = strategy._samples[:8] * 4  # repeats however they came: each picked once
        picks, _ = strategy._search(16)
        assert strategy._drafts == drafts  # no new draft replaced the repeats
        assert len({int(tvm_ffi.structural_hash(s.mod)) for s in picks}) == len(picks) == 8
    finally:
        strategy._finish()
