"""Fresh samples drawn with the GPU's limits checked before the replay (`bridge.sampling`,
`bridge.space_plan`), on real MetaSchedule design spaces for an H100 target (no GPU needed): the
tile draws follow MetaSchedule's own `SamplePerfectTile`, the shared-memory formula matches the
replayed schedules, every draw turned away would have failed `VerifyGPUCode`, and a first draft
samples this way on a GPU target only."""

import collections

import numpy as np
import pytest
from tvm.s_tir.schedule import Schedule

from bridge.draft_verify import DraftVerifySearch
from bridge.drafting import sample_init
from bridge.psa import PSACostModel
from bridge.sampling import ConstrainedSampler
from bridge.search import _pairs
from bridge.space_plan import MAX_VTHREAD, SpacePlan, perfect_tiles, shared_bytes
from data.zoo import operator_task
from tvm_env import ms, parse_target, setup, task_context

MATMUL = "matmul:197,768,768"  # ViT-B/16's tokens: 197 is prime, so most of its tiles do not fit
CONV = "conv2d:1,224,224,3,768,16,16,0"  # ViT-B/16's patch embedding: 3-4 of 512 MetaSchedule samples valid


def _context(spec: str, target: str = "nvidia/nvidia-h100", threads: int = 2):
    target = parse_target(target)
    setup(target)
    strategy = DraftVerifySearch(draft=PSACostModel(device="h100"), population_size=64, potential_size=32)
    context = task_context(operator_task(spec).mod, target, strategy, spec, threads=threads, seed=0)
    return context, context.generate_design_space()


@pytest.fixture(scope="module")
def matmul():
    return _context(MATMUL)


@pytest.fixture(scope="module")
def conv():
    return _context(CONV)


def test_tile_draws_split_each_primes_exponent_uniformly_over_metaschedules_outcomes():
    """A loop of 12 in 3 with the innermost at most 4: 2's exponent split 6 ways, 3 at 3 places, 15 of
    the 18 with the innermost <= 4, each drawn a fifteenth of the time; the same outcomes TVM's own
    `sample_perfect_tile` draws. (TVM's draws are not uniform among them: its engine's consecutive
    draws are correlated, and 2's exponent goes to the outer factor about a tenth as often as to the
    others. The sampler keeps the distribution MetaSchedule's code describes.)"""
    ours = perfect_tiles(np.random.default_rng(0), 12, 3, 20000)
    assert (ours.prod(axis=1) == 12).all() and len({tuple(r) for r in ours.tolist()}) == 18
    ours = ours[ours[:, -1] <= 4]
    counts = collections.Counter(map(tuple, ours.tolist()))
    assert len(counts) == 15
    for outcome, n in counts.items():  # 1/15 = 0.0667, one standard deviation 0.0019
        assert abs(n / len(ours) - 1 / 15) < 0.01, (outcome, n)
    mod = operator_task("matmul:12,12,12").mod
    theirs = set()
    for seed in range(1, 801):
        sch = Schedule(mod, seed=seed)
        loop = sch.get_loops(sch.get_sblock("C"))[0]
        theirs.add(tuple(int(sch.get(v)) for v in sch.sample_perfect_tile(loop, n=3, max_innermost_factor=4)))
    assert theirs == set(counts)


@pytest.mark.parametrize("task", ["matmul", "conv"])
def test_the_formula_matches_replays_and_every_draw_turned_away_fails_verify_gpu_code(task, request):
    context, spaces = request.getfixturevalue(task)
    postprocs = list(context.space_generator.postprocs)
    plans = [SpacePlan(context.mod, space, 1024) for space in spaces]
    assert all(plan.formula_ok for plan in plans)
    assert all(plan.bounds and plan.caches for plan in plans)
    checked = collections.Counter()
    for index, plan in enumerate(plans):
        tiles, fit = plan.draw(np.random.default_rng(index), 2048)
        used = plan.shared_bytes(tiles)
        threads_ok = plan.threads_fit(tiles)
        within = used <= 49152
        picks = [
            ("fits", np.flatnonzero(fit & within)[:3]),
            ("over_shared", np.flatnonzero(fit & ~within)[:4]),
            ("threads", np.flatnonzero(~threads_ok)[:4]),
        ]
        for why, rows in picks:
            for row in rows:
                sch = Schedule(context.mod, seed=int(row) + 1)
                plan.trace(tiles, int(row)).apply_to_schedule(sch, remove_postproc=True)
                assert shared_bytes(sch) == used[row]  # the formula is exact, not a bound
                sch.enter_postproc()
                valid = all(p.apply(sch) for p in postprocs)
                assert valid == (why == "fits"), (task, index, why, [t[row].tolist() for t in tiles])
                checked[why] += 1
    assert min(checked.values()) >= 3, checked


def test_the_thread_bounds_come_from_the_trace(matmul):
    context, spaces = matmul
    plan = SpacePlan(context.mod, spaces[0], 1024)
    axes = sorted(bound.axis for bound in plan.bounds)
    assert axes == ["threadIdx.x", "vthread.x"]
    thread = next(b for b in plan.bounds if b.axis == "threadIdx.x")
    assert (thread.low, thread.high) == (32, 1024)  # MultiLevelTiling's annotations on the block
    tiles, _ = plan.draw(np.random.default_rng(0), 4096)
    vthread = next(b for b in plan.bounds if b.axis == "vthread.x")
    extent = np.ones(4096, dtype=np.int64)
    for t, p in vthread.parts:
        extent = extent * tiles[t][:, p]
    assert not plan.threads_fit(tiles)[extent > MAX_VTHREAD].any()


def test_the_sampler_keeps_metaschedules_yield_a_pass_and_replays_only_what_fits(conv, matmul):
    context, spaces = conv
    sampler = ConstrainedSampler(context, spaces, min_samples=12, threads=2, seed=3)
    got = sampler.sample(512)
    stats = sampler.stats
    assert len(got) >= 12 == sampler.min_samples and stats["valid"] == len(got)
    assert stats["draws"] == 512 * stats["passes"] and stats["replays"] == stats["draws"] - stats["turned_away"]
    assert stats["replays"] <= 1.25 * len(got)  # about one replay a valid schedule, not 100
    postprocs = list(context.space_generator.postprocs)
    for sch in got[:6]:  # valid: the postprocessors pass the replayed trace again
        again = Schedule(context.mod, seed=1)
        sch.trace.apply_to_schedule(again, remove_postproc=True)
        again.enter_postproc()
        assert all(p.apply(again) for p in postprocs)
    # the draws do not depend on the threads
    one = ConstrainedSampler(context, spaces, min_samples=12, threads=1, seed=3).sample(512)
    assert [k for k, _ in _pairs(one)] == [k for k, _ in _pairs(got)]
    # a pass yields about what MetaSchedule's pass of as many replays yields: about 11 of 512 here
    # against MetaSchedule's 22 (its engine's skew favours this matmul's valid tiles; the two agree on
    # ViT-B/16's patch embedding, 3-4 a pass), so within a factor of three
    context, spaces = matmul
    ours = ConstrainedSampler(context, spaces, min_samples=1, threads=2, seed=0)
    per_pass = [len(ours.sample(512)) for _ in range(12)]
    search = ms.search_strategy.EvolutionarySearch(population_size=512, init_min_unmeasured=1)
    search._initialize_with_tune_context(context)
    search.pre_tuning(64, 16, spaces, ms.database.MemoryDatabase(), ms.cost_model.RandomModel())
    try:
        theirs = [len(sample_init(search, 512)) for _ in range(3)]
    finally:
        search.post_tuning()
    assert 1 / 3 < (sum(per_pass) / 12) / (sum(theirs) / 3) < 3, (per_pass, theirs)


def test_a_space_without_the_formula_is_checked_after_its_replay(matmul):
    context, spaces = matmul
    sampler = ConstrainedSampler(context, spaces, min_samples=8, threads=2, seed=1)
    for plan in sampler.plans:
        plan.formula_ok = False  # as a space with a shared write cache has it
    got = sampler.sample(512)
    stats = sampler.stats
    assert len(got) >= 8 and stats["over_shared"] > 0  # replayed, then turned away
    assert stats["valid"] + stats["over_shared"] + stats["postproc_failed"] == stats["replays"]


def _first_sampler(target: str, **options):
    target = parse_target(target)
    setup(target)
    strategy = DraftVerifySearch(draft=PSACostModel(device="h100"), population_size=64, potential_size=32, **options)
    context = task_context(operator_task(MATMUL).mod, target, strategy, "mm", threads=1, seed=0)
    strategy.pre_tuning(
        64, 16, context.generate_design_space(), ms.database.MemoryDatabase(), ms.cost_model.RandomModel()
    )
    try:
        return strategy, type(strategy.first_sampler).__name__, type(strategy.resampler).__name__
    finally:
        strategy._finish()


def test_a_first_draft_samples_this_way_on_a_gpu_target_only():
    strategy, first, again = _first_sampler("nvidia/nvidia-h100")
    assert (first, again) == ("ConstrainedSampler", "EvolutionarySearch")  # re-drafts: MetaSchedule's
    assert _first_sampler("nvidia/nvidia-h100", constrained_sampling=False)[1] == "EvolutionarySearch"
    assert _first_sampler({"kind": "llvm", "num-cores": 2})[1] == "EvolutionarySearch"


def test_a_first_draft_samples_until_fifty_are_valid_as_metaschedule_does(matmul):
    strategy, *_ = _first_sampler("nvidia/nvidia-h100")
    target = parse_target("nvidia/nvidia-h100")
    context = task_context(operator_task(MATMUL).mod, target, strategy, "mm", threads=1, seed=0)
    strategy.pre_tuning(
        64, 16, context.generate_design_space(), ms.database.MemoryDatabase(), ms.cost_model.RandomModel()
    )
    try:
        result = strategy._new_draft().run()
        assert result.stats["samples"] >= 50 and result.stats["samples_asked"] == 64, result.stats
        assert len(result.evolved) > 0 and strategy.first_sampler.stats["valid"] == result.stats["samples"]
    finally:
        strategy._finish()
