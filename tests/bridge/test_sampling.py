"""Fresh samples drawn with the GPU's limits checked before the replay (`bridge.sampling`,
`bridge.space_plan`), on real MetaSchedule design spaces for an H100 target (no GPU needed): the
tile draws follow MetaSchedule's own `SamplePerfectTile`, the shared-memory formula matches the
replayed schedules, every draw turned away would have failed `VerifyGPUCode`, and a first draft
samples this way on a GPU target only."""

import collections

import numpy as np
import pytest
import tvm
from tvm import te
from tvm.s_tir.schedule import Schedule

from bridge.draft_verify import DraftVerifySearch
from bridge.drafting import sample_init
from bridge.psa import PSACostModel
from bridge.sampling import ConstrainedSampler
from bridge.search import _pairs
from bridge.space_plan import SpacePlan, perfect_tiles, shared_bytes
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
    unbounded = perfect_tiles(np.random.default_rng(0), 12, 3, 20000)
    assert (unbounded.prod(axis=1) == 12).all() and len({tuple(r) for r in unbounded.tolist()}) == 18
    ours = perfect_tiles(np.random.default_rng(0), 12, 3, 20000, max_innermost=4)  # drawn again, as TVM does
    assert len(ours) == 20000 and (ours[:, -1] <= 4).all() and (ours.prod(axis=1) == 12).all()
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
        tiles, threads_ok = plan.draw(np.random.default_rng(index), 2048)
        used = plan.shared_bytes(tiles)
        within = used <= 49152
        fit = threads_ok
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


def test_the_thread_bounds_come_from_the_trace_and_vthreads_are_not_limited(matmul):
    context, spaces = matmul
    plan = SpacePlan(context.mod, spaces[0], 1024)
    assert [b.axis for b in plan.bounds] == ["threadIdx.x"] and plan.threads_checked
    assert (plan.bounds[0].low, plan.bounds[0].high) == (32, 1024)  # MultiLevelTiling's annotations
    # VerifyGPUCode's limit of 8 vthreads is on `vthread.s` loops, which these spaces never leave: a
    # draw with more that fits otherwise is valid, so the plan must not turn it away
    tiles, fit = plan.draw(np.random.default_rng(0), 4096)
    fit &= plan.shared_bytes(tiles) <= 49152
    vthread = tiles[0][:, 1] * tiles[1][:, 1]  # SSSRRSRS: the second level of i and j is the vthread
    rows = np.flatnonzero(fit & (vthread > 8))[:2]
    assert len(rows) == 2
    postprocs = list(context.space_generator.postprocs)
    for row in rows:
        sch = Schedule(context.mod, seed=1)
        plan.trace(tiles, int(row)).apply_to_schedule(sch, remove_postproc=True)
        sch.enter_postproc()
        assert all(p.apply(sch) for p in postprocs), [t[row].tolist() for t in tiles]


def _fp16_matmul(n: int = 256) -> tvm.IRModule:
    a, b = te.placeholder((n, n), "float16", name="a"), te.placeholder((n, n), "float16", name="b")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k].astype("float32") * b[k, j].astype("float32"), axis=k), name="c")
    return tvm.IRModule({"main": te.create_prim_func([a, b, c])})


def test_tensor_core_spaces_are_not_checked_on_threads_and_still_sample():
    """An fp16 matmul's tensor-core spaces bind `threadIdx.y` and run warps (VerifyGPUCode counts
    `threadIdx.x` as a warp there): the plan leaves their threads and shared memory to the
    postprocessors, and the sampler still finds valid schedules."""
    target = parse_target("nvidia/nvidia-h100")
    setup(target)
    strategy = DraftVerifySearch(draft=PSACostModel(device="h100"), population_size=64, potential_size=32)
    context = task_context(_fp16_matmul(), target, strategy, "mm16", threads=2, seed=0)
    spaces = context.generate_design_space()
    warps = [space for space in spaces if "warp_execution" in str(space.trace)]
    assert warps
    sampler = ConstrainedSampler(context, spaces, min_samples=8, threads=2, seed=0)
    got = sampler.sample(128)
    assert len(got) >= 8 and sampler.stats["valid"] == len(got)
    for space, plan in zip(spaces, sampler.plans):
        if "warp_execution" in str(space.trace):
            assert not plan.threads_checked


def test_the_sampler_keeps_metaschedules_yield_a_pass_and_replays_only_what_fits(conv, matmul):
    context, spaces = conv
    sampler = ConstrainedSampler(context, spaces, min_samples=12, threads=2, seed=3)
    got = sampler.sample(512)
    stats = sampler.stats
    assert len(got) >= 12 == sampler.min_samples and stats["valid"] == len(got)
    assert stats["draws"] == 512 * stats["passes"] and stats["replays"] == stats["draws"] - stats["turned_away"]
    assert stats["replays"] <= 1.25 * len(got)  # about one replay a valid schedule, not 100
    assert stats["draws"] == 512 * stats["passes"]
    postprocs = list(context.space_generator.postprocs)
    for sch in got[:6]:  # valid: the postprocessors pass the replayed trace again
        again = Schedule(context.mod, seed=1)
        sch.trace.apply_to_schedule(again, remove_postproc=True)
        again.enter_postproc()
        assert all(p.apply(again) for p in postprocs)
    # the draws do not depend on the threads
    one = ConstrainedSampler(context, spaces, min_samples=12, threads=1, seed=3).sample(512)
    assert [k for k, _ in _pairs(one)] == [k for k, _ in _pairs(got)]
    # a pass yields about what MetaSchedule's pass of as many replays yields (its random engine skews
    # its tile draws, so not exactly: within a factor of two)
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
    assert 0.5 < (sum(per_pass) / 12) / (sum(theirs) / 3) < 2, (per_pass, theirs)


def test_a_check_that_turns_away_a_valid_draw_is_dropped_for_the_space(matmul):
    context, spaces = matmul
    sampler = ConstrainedSampler(context, spaces, min_samples=8, threads=2, seed=1)
    sampler.max_shared = 16384  # a third of the real limit: the formula turns away valid schedules
    assert not any(plan.formula_ok for plan in sampler.plans)  # the probes replayed some: dropped
    got = sampler.sample(512)
    assert len(got) >= 8 and sampler.stats["valid"] + sampler.stats["postproc_failed"] == sampler.stats["replays"]
    honest = ConstrainedSampler(context, spaces, min_samples=8, threads=2, seed=1)
    assert all(plan.formula_ok and plan.threads_checked for plan in honest.plans)


def _pre_tuned(target: str, **options) -> DraftVerifySearch:
    """A search of the matmul made ready to draft on `target` (end it with `_finish()`)."""
    target = parse_target(target)
    setup(target)
    strategy = DraftVerifySearch(draft=PSACostModel(device="h100"), population_size=64, potential_size=32, **options)
    context = task_context(operator_task(MATMUL).mod, target, strategy, "mm", threads=1, seed=0)
    strategy.pre_tuning(
        64, 16, context.generate_design_space(), ms.database.MemoryDatabase(), ms.cost_model.RandomModel()
    )
    return strategy


def _samplers(target: str, **options) -> tuple[str, str]:
    """The kinds of sampler a task's first draft and its re-drafts use on `target`."""
    strategy = _pre_tuned(target, **options)
    try:
        return type(strategy.first_sampler).__name__, type(strategy.resampler).__name__
    finally:
        strategy._finish()


def test_a_first_draft_samples_this_way_on_a_gpu_target_only():
    first, again = _samplers("nvidia/nvidia-h100")
    assert (first, again) == ("ConstrainedSampler", "EvolutionarySearch")  # re-drafts: MetaSchedule's
    assert _samplers("nvidia/nvidia-h100", constrained_sampling=False)[0] == "EvolutionarySearch"
    assert _samplers({"kind": "llvm", "num-cores": 2})[0] == "EvolutionarySearch"


def test_a_first_draft_samples_until_fifty_are_valid_as_metaschedule_does():
    strategy = _pre_tuned("nvidia/nvidia-h100")
    try:
        result = strategy._new_draft().run()
        assert result.stats["samples"] >= 50 and result.stats["samples_asked"] == 64, result.stats
        assert len(result.evolved) > 0 and strategy.first_sampler.stats["valid"] == result.stats["samples"]
    finally:
        strategy._finish()
