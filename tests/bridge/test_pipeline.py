"""Pipelined draft-then-verify on real llvm tuning: the next batch is searched and built ahead."""

import json
import math
import shutil
import time

import pytest
from tvm.ir.utils import derived_object

from bridge.config import CostModelConfig, MeasureConfig, SearchConfig, TuneConfig
from bridge.curve import device_idle_share
from bridge.pipeline import Pipeline, PrefetchBuilder
from bridge.search_log import read_rounds
from bridge.tuning import CURVE_CSV, tune_tasks
from data import zoo
from tvm_env import ms, tvm, tvm_ffi

TARGET = '{"kind": "llvm", "mcpu": "native", "num-cores": 2}'


def run(tmp_path, builder, runner, pipeline: bool, trials=12, fill_device=0, search_ahead=2):
    return tune_tasks(
        [zoo.operator_task("matmul:64,64,64")],
        json.loads(TARGET),
        TuneConfig(out=str(tmp_path), trials=trials, trials_per_round=4),
        cost_model=CostModelConfig(name="pam", epochs=3),
        search=SearchConfig(
            psa="a100",
            population=48,
            potential=12,
            pipeline=pipeline,
            fill_device=fill_device,
            search_ahead=search_ahead,
        ),
        measure=MeasureConfig(number=2, min_repeat_ms=5),
        builder=builder,
        runner=runner,
        progress=False,
    )


@pytest.fixture(scope="module")
def ahead(tmp_path_factory, builder, runner):
    """(out dir, result) of one pipelined run of 20 trials in rounds of 4, searching two rounds ahead
    (`search_ahead` 2, the default) on the module's pooled builder: the tests of pipelined rounds, of
    searching two rounds ahead and of a resume all look at this one run."""
    out = tmp_path_factory.mktemp("ahead") / "run"
    return out, run(out, builder, runner, pipeline=True, trials=20, search_ahead=2)


def test_pipelined_rounds_build_ahead_and_measure_distinct_schedules(ahead):
    out, result = ahead
    rows = result.rows
    assert [r["total_trials"] for r in rows] == [4, 8, 12, 16, 20]
    records = result.database.get_all_tuning_records()
    assert len({int(tvm_ffi.structural_hash(r.as_measure_candidate().sch.mod)) for r in records}) == 20
    # Round 1 is searched in the loop; every later round was searched and built during the rounds before.
    assert math.isnan(rows[0]["prebuild_s"]) and all(r["prebuild_s"] > 0 for r in rows[1:])
    for r in rows[1:]:
        assert r["build_s"] < 0.5 * r["prebuild_s"]  # the loop found the batch built
        assert r["wait_s"] >= 0 and r["draft_s"] >= 0 and r["verify_s"] >= 0
    # every batch, built ahead or in the loop, has its workers' CPU and wall seconds, within what
    # its 2 workers could spend in the batch's own wall time
    for r, wall in zip(rows, [rows[0]["build_s"], *(r["prebuild_s"] for r in rows[1:])]):
        assert 0 < r["build_cpu_s"] and 0 < r["build_work_s"] <= 2 * wall, r
    assert all(r["update_s"] >= 0 for r in rows)
    # PAM trains after every batch, in the background: every row has the seconds of training (and
    # of waiting for it) since the row before; a run this short may end before the first is done
    assert all(r["learn_s"] >= 0 and r["learn_wait_s"] >= 0 for r in rows)
    saved = read_rounds(out / CURVE_CSV)
    assert [r["prebuild_s"] > 0 for r in saved[1:]] == [True] * 4
    assert 0.0 <= device_idle_share(rows) < 1.0


@derived_object
class SlowBuilder(ms.builder.PyBuilder):
    """A real builder behind a fixed latency a call, as of a slow compiler (NVRTC on the GPU suite)."""

    def __init__(self, builder, delay_s: float):
        super().__init__()
        self.builder, self.delay_s = builder, delay_s

    def build(self, build_inputs):
        time.sleep(self.delay_s)
        return self.builder.build(build_inputs)


def test_fill_device_grows_the_batches_while_the_host_outlasts_the_device(tmp_path, builder, runner):
    """llvm runs of a 64^3 matmul take a fraction of a second a trial, the search and (slow) build of
    a batch seconds, so the batches grow from the 4 trials a round, at most twofold a round and up
    to the limit of 8: 4 (searched in the loop), 4 (searched ahead before any batch ran), then
    more (how much more follows the timings, e.g. 6 or 8)."""
    slow = SlowBuilder(builder, delay_s=1.5)
    result = run(tmp_path / "fill", slow, runner, pipeline=True, trials=20, fill_device=8)
    sizes = [int(r["trials"]) for r in result.rows]
    assert sizes[:2] == [4, 4] and sum(sizes) == 20 and max(sizes) > 4, sizes
    for before, size in zip(sizes[1:-1], sizes[2:-1]):  # the last batch is what the budget left
        assert 4 <= size <= min(8, 2 * before), sizes
    records = result.database.get_all_tuning_records()
    assert len({int(tvm_ffi.structural_hash(r.as_measure_candidate().sch.mod)) for r in records}) == 20
    # rounds in turn keep their 4 trials whatever fill_device says: test_unpipelined_rounds_...


@pytest.mark.parametrize("pooled", [True, False], ids=["pooled", "in-one-call"])
def test_searching_two_rounds_ahead_overlaps_search_and_build_and_measures_each_once(
    request, tmp_path, builder, runner, pooled
):
    """With `search_ahead` 2, a round's batch is searched one job earlier, and built while the batch
    after it is searched: from the third round on, each batch's build starts with its job (no
    search of its own before it), and the job lasts as long as that build, the next batch's search
    inside it. A builder without `submit` (one that sleeps 1 s a call, then builds the batch in one
    call) builds on a thread of the PrefetchBuilder's own. Nothing is measured twice, and the budget
    is met. (The pooled run is the module's `ahead` run.)"""
    if pooled:
        _, result = request.getfixturevalue("ahead")
    else:
        result = run(tmp_path / "ahead", SlowBuilder(builder, delay_s=1.0), runner, pipeline=True, trials=20)
    rows = result.rows
    assert [r["total_trials"] for r in rows] == [4, 8, 12, 16, 20]
    records = result.database.get_all_tuning_records()
    assert len({int(tvm_ffi.structural_hash(r.as_measure_candidate().sch.mod)) for r in records}) == 20
    assert math.isnan(rows[0]["prebuild_s"]) and all(r["prebuild_s"] > 0 for r in rows[1:])
    for r in rows[1:]:
        assert r["build_s"] < 0.5 * r["prebuild_s"], r  # built ahead
        assert r["job_s"] >= r["prebuild_s"] - 1e-6, r
    for r in rows[2:]:  # searched in the job before: the build is the whole job
        assert r["job_s"] - r["prebuild_s"] < 0.05, r
    assert sum(r["draft_s"] + r["verify_s"] for r in rows[2:]) > 0  # those searches ran, inside earlier jobs
    if not pooled:
        assert all(r["prebuild_s"] >= 1.0 for r in rows[1:]), rows  # the 1 s of every call
    with pytest.raises(ValueError, match="search-ahead 3"):
        SearchConfig(psa="a100", search_ahead=3)


def test_unpipelined_rounds_wait_for_the_whole_search(tmp_path, builder, runner):
    """Rounds in turn: the loop waits for the whole search and builds the batch itself; with no
    background job to cover, every batch keeps its 4 trials though `fill_device` allows 12."""
    rows = run(tmp_path / "off", builder, runner, pipeline=False, trials=12, fill_device=12).rows
    assert [r["total_trials"] for r in rows] == [4, 8, 12] and [r["trials"] for r in rows] == [4, 4, 4]
    assert all(math.isnan(r["prebuild_s"]) for r in rows)
    for r in rows:  # in turn: the loop waited for all of the search, and built the batch itself
        assert r["wait_s"] >= r["draft_s"] + r["verify_s"] - 1e-6
        assert 0 < r["build_cpu_s"] and 0 < r["build_work_s"] <= 2 * r["build_s"], r


def test_a_resumed_pipelined_run_continues_without_measuring_twice(ahead, tmp_path, builder, runner):
    """A copy of the module's finished 20-trial run, resumed for two more (pipelined) rounds."""
    shutil.copytree(ahead[0], tmp_path / "resumed")
    result = run(tmp_path / "resumed", builder, runner, pipeline=True, trials=28)
    records = result.database.get_all_tuning_records()
    assert len(records) == 28 and [r["total_trials"] for r in result.rows][-3:] == [20, 24, 28]
    walls = [r["draft_wall_s"] for r in result.rows]  # the drafting on the wall goes on from the earlier run's
    assert walls[-3] > 0 and walls == sorted(walls), walls
    assert len({int(tvm_ffi.structural_hash(r.as_measure_candidate().sch.mod)) for r in records}) == 28


def test_pipeline_reraises_the_background_error_and_discards_unused_builds(tmp_path, make_builder):
    pipeline = Pipeline(PrefetchBuilder(builder=make_builder(max_workers=1)))

    def boom():
        raise RuntimeError("search failed")

    pipeline.submit(boom)
    with pytest.raises(RuntimeError, match="search failed"):
        pipeline.join()
    assert pipeline.join() == 0.0  # nothing in flight any more
    pipeline.close()


def test_join_search_lets_the_build_go_on():
    import time

    pipeline, built = Pipeline(), []
    pipeline.submit(lambda: "picks", lambda picks: (time.sleep(0.5), built.append(picks)))
    assert pipeline.join_search() < 0.4 and not built  # the search is done, the build goes on
    assert pipeline.join() > 0.1 and built == ["picks"]
    assert pipeline.join_search() == 0.0 and pipeline.join() == 0.0


def test_build_apart_searches_the_next_job_while_the_last_builds_and_joins_a_task_its_own():
    import time

    pipeline, events = Pipeline(build_apart=True), []

    def search(name):
        return lambda: events.append((f"search {name}", time.perf_counter())) or name

    def slow_build(name):
        return lambda _: (time.sleep(1.0), events.append((f"built {name}", time.perf_counter())))

    start = time.perf_counter()
    first = pipeline.submit(search("a"), slow_build("a"))
    second = pipeline.submit(search("b"), slow_build("b"))
    assert time.perf_counter() - start < 0.5  # queued: submit does not wait for the job before
    assert pipeline.join_search() < 0.5  # both searches ran while a's build waited
    order = [name for name, _ in events]
    assert order[:2] == ["search a", "search b"] and "built a" not in order
    pipeline.join(upto=first)  # a's job whole; b's goes on
    assert [name for name, _ in events][-1] == "built a" and not second.done()
    assert pipeline.join(upto=first) == 0.0  # joined already
    pipeline.join()
    assert [name for name, _ in events] == ["search a", "search b", "built a", "built b"]


def test_build_apart_reraises_a_failed_build_at_its_join():
    pipeline = Pipeline(build_apart=True)

    def broken(_):
        raise RuntimeError("build failed")

    job = pipeline.submit(lambda: "picks", broken)
    pipeline.submit(lambda: "more")
    with pytest.raises(RuntimeError, match="build failed"):
        pipeline.join(upto=job)
    assert pipeline.join() >= 0.0


def test_a_network_tuned_with_build_apart_measures_every_task_and_each_schedule_once(tmp_path, builder, runner):
    tasks = [zoo.operator_task(spec) for spec in ("matmul:64,64,64", "matmul:32,64,32")]
    result = tune_tasks(
        tasks,
        json.loads(TARGET),
        TuneConfig(out=str(tmp_path), trials=16, trials_per_round=4),
        cost_model=CostModelConfig(name="pam", epochs=3),
        search=SearchConfig(psa="a100", population=48, potential=12, fill_device=0, build_apart=True),
        measure=MeasureConfig(number=2, min_repeat_ms=5),
        builder=builder,
        runner=runner,
        progress=False,
    )
    rows = result.rows
    assert sum(r["trials"] for r in rows) == 16 and {r["task"] for r in rows} == {t.name for t in tasks}
    records = result.database.get_all_tuning_records()
    assert len({int(tvm_ffi.structural_hash(r.as_measure_candidate().sch.mod)) for r in records}) == 16
    assert all(r["prebuild_s"] > 0 for r in rows if r["round"] > 1)  # later rounds were built ahead


def _matmul(n: int, unroll: bool = False):
    from tvm import te
    from tvm.s_tir.meta_schedule.testing import te_workload

    sch = tvm.s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func(te_workload.matmul(n, n, n))}))
    if unroll:  # every loop unrolled: n^3 statements, about 2.5 s of LLVM for n = 20 on the 2-core host
        for loop in sch.get_loops(sch.get_sblock("C")):
            sch.unroll(loop)
    return sch.mod


def test_wait_most_stops_waiting_on_the_last_tenth_after_the_grace():
    from concurrent.futures import ThreadPoolExecutor

    from bridge.pipeline import wait_most

    with ThreadPoolExecutor(10) as pool:
        futures = [pool.submit(time.sleep, 1.5 if i == 7 else 0.05) for i in range(10)]
        start = time.perf_counter()
        done, pending = wait_most(futures, grace=1.0)
        assert pending == [7] and done == [0, 1, 2, 3, 4, 5, 6, 8, 9]
        assert time.perf_counter() - start < 1.0  # about 2 x 0.05 s, not 1.5 s
        futures = [pool.submit(time.sleep, 0.6 if i == 3 else 0.05) for i in range(10)]
        assert wait_most(futures, grace=None) == (list(range(10)), [])  # no grace: every one
        assert wait_most([], grace=0.0) == ([], [])


def test_a_prefetch_leaves_a_straggler_building_and_the_batch_after_takes_it_over(builder):
    """Nine quick builds and one of ~2.5 s: with a grace the prefetch returns with the nine and the
    straggler's index; MetaSchedule's later build of all ten finds nine built and waits for the tenth.
    Without a grace the prefetch waits for all ten."""
    from tvm_env import parse_target

    target = parse_target({"kind": "llvm", "num-cores": 1})
    mods = [_matmul(n) for n in range(4, 13)]
    mods.insert(5, _matmul(20, unroll=True))
    builder.warm()  # the module's 2 workers
    prefetch = PrefetchBuilder(builder=builder, straggler_grace=0.5)
    early, pending, built = prefetch.prefetch(mods, target)
    assert pending == [5], (early, pending)  # returned while the straggler was still building
    assert built["build_cpu_s"] > 0 and built == prefetch.last_batch  # what the nine cost, as this call took it
    # the batch: the nine built, the straggler taken over, and one never prefetched, built afresh
    results = prefetch.build([ms.builder.BuilderInput(m, target) for m in [*mods, _matmul(3)]])
    assert all(r.error_msg is None and r.artifact_path for r in results)
    assert (prefetch.hits, prefetch.misses) == (9, 2)
    assert prefetch.last_batch["build_cpu_s"] > 1.0  # the straggler's own build, taken over, with the fresh one's
    assert prefetch.built_batch == prefetch.last_batch
    assert built["build_cpu_s"] > 0 and built != prefetch.last_batch  # the prefetch's own figures stay its own
    waits = PrefetchBuilder(builder=builder)
    seconds, pending, _ = waits.prefetch(mods[4:7], target)
    # the straggler alone takes about 2.5 s; the grace returned sooner than waiting for it (relative,
    # not an absolute bound: under a loaded machine, e.g. two test workers, every build takes longer)
    assert pending == [] and seconds > 1.5 and early < seconds, (early, seconds)
    with pytest.raises(ValueError, match="straggler_grace=-1"):
        PrefetchBuilder(builder=builder, straggler_grace=-1)


def test_a_batchs_row_takes_its_own_builds_figures_when_a_prefetch_lands_after_it(builder):
    """MetaSchedule's loop reads the builder's figures after its `build` returns; a prefetch of the
    next batch, on the pipeline's thread, may have set `last_batch` by then. The loop's timed builder
    takes the build's own (`built_batch`), which the prefetch leaves alone."""
    from bridge.search_log import SearchLog
    from tvm_env import parse_target

    target = parse_target({"kind": "llvm", "num-cores": 1})
    prefetch = PrefetchBuilder(builder=builder)
    later = [_matmul(n) for n in (9, 10, 11)]

    class PrefetchInBetween:  # the build, then the next batch's prefetch before anyone reads the figures
        last_batch = property(lambda self: prefetch.last_batch)
        built_batch = property(lambda self: prefetch.built_batch)

        def build(self, inputs):
            results = prefetch.build(inputs)
            self.prefetched = prefetch.prefetch(later, target)[2]
            return results

    between = PrefetchInBetween()
    log = SearchLog()
    results = log.builder(between).build([ms.builder.BuilderInput(_matmul(n), target) for n in (5, 6, 7)])
    assert all(r.error_msg is None for r in results)
    (_, _, told), built = log._builds[-1], prefetch.built_batch
    assert told == built and built["build_cpu_s"] > 0  # the batch's own figures
    assert between.prefetched == prefetch.last_batch != told  # what the prefetch built came later


def test_a_prefetch_of_a_batch_holding_one_schedule_twice_builds_it_once(builder):
    """A batch with one module twice (two picks that lower to the same schedule) builds it once and
    hands it out once; popping the repeat's build raised a KeyError that ended a BERT-base run."""
    from tvm_env import parse_target

    target = parse_target({"kind": "llvm", "num-cores": 1})
    mods = [_matmul(4), _matmul(5), _matmul(4)]

    @derived_object
    class Counting(ms.builder.PyBuilder):  # no `submit`: `start` builds the batch on its own thread
        def __init__(self):
            super().__init__()
            self.built = 0

        def build(self, build_inputs):
            self.built += len(build_inputs)
            return builder.build(build_inputs)

    for inner in (builder, Counting()):  # with the pooled builder's `submit`, and without it
        prefetch = PrefetchBuilder(builder=inner)
        seconds, pending, _ = prefetch.prefetch(mods, target)
        assert pending == [] and seconds > 0
        results = prefetch.build([ms.builder.BuilderInput(m, target) for m in mods[:2]])
        assert all(r.error_msg is None and r.artifact_path for r in results)
        assert (prefetch.hits, prefetch.misses) == (2, 0)
        prefetch.discard()
    assert inner.built == 2
    # a batch handed to `build` with a repeat of a build still running: taken over once, the repeat
    # built afresh, so that each result's build folder can be removed (as MetaSchedule's callback does)
    taking = PrefetchBuilder(builder=builder)
    taking.start(mods[:2], target)
    results = taking.build([ms.builder.BuilderInput(m, target) for m in mods])
    assert all(r.error_msg is None and r.artifact_path for r in results)
    assert len({r.artifact_path for r in results}) == 3 and (taking.hits, taking.misses) == (0, 3)
    for r in results:
        ms.utils.remove_build_dir(r.artifact_path)
    taking.discard()


def test_a_straggler_left_building_is_measured_in_the_next_batch_once(tmp_path, builder, runner):
    """A zero grace defers whatever is still building when 90% of a batch of 12 is built (on 2 workers,
    the 12th): the deferred pick is measured in a later batch (the next one, or the one after when the
    next was already building: `search_ahead` 2), nothing is measured twice and nothing is lost."""
    result = tune_tasks(
        [zoo.operator_task("matmul:64,64,64")],
        json.loads(TARGET),
        TuneConfig(out=str(tmp_path), trials=36, trials_per_round=12),
        cost_model=CostModelConfig(name="pam", epochs=3),
        search=SearchConfig(psa="a100", population=64, potential=24, straggler_grace=0.0),
        measure=MeasureConfig(number=2, min_repeat_ms=5),
        builder=builder,
        runner=runner,
        progress=False,
    )
    rows = result.rows
    records = result.database.get_all_tuning_records()
    assert sum(r["trials"] for r in rows) == len(records) == 36
    assert len({int(tvm_ffi.structural_hash(r.as_measure_candidate().sch.mod)) for r in records}) == 36
    deferred = [r["deferred"] for r in rows[1:]]
    assert sum(deferred) >= 1, deferred
    # Three batches searched 12 picks each; a later one holds only picks left building. A batch is
    # handed out without the picks it deferred, and with some of those deferred before it.
    pending = 0
    for i, r in enumerate(rows[1:], start=1):
        searched, d = (12 if i < 3 else 0), int(r["deferred"])
        joined = int(r["trials"]) - (searched - d)
        assert 0 <= joined <= pending, rows
        pending += d - joined
    assert pending == 0 and len(rows) <= 4, rows
    assert math.isnan(rows[0]["deferred"])  # searched in the loop, not built ahead
