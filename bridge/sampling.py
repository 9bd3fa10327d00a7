"""A task's fresh random schedules for a GPU target, as MetaSchedule's `SampleInitPopulation` draws
them, with the draws that `VerifyGPUCode` would reject turned away before they cost a replay.

MetaSchedule samples a schedule by replaying a design space's trace with random decisions, then runs
its postprocessors; on a CUDA target `VerifyGPUCode` rejects 97-99% of a tiled task's samples (ViT-B/16
on an H100 target: a matmul keeps 11 of 512, the patch embedding's conv 3-4), so a first draft that
wants 50 valid schedules pays for 5-15 passes of 512 replays (`benchmarks/sample_yield.py`). Most of
those rejections follow from the tile sizes alone (too many or too few threads, more shared memory
than a thread block has), and `bridge.space_plan.SpacePlan` reads from a design space's trace how.

`ConstrainedSampler.sample(num)` is `SampleInitPopulation` without the replays that would fail: it
draws the tile decisions itself (as MetaSchedule's `SamplePerfectTile` does), turns away a draw whose
threads or shared memory are out of bounds, replays the rest with the other decisions (unroll steps,
fetch widths, `AutoBind`'s thread extents) left to the replay, and keeps what every postprocessor
passes (`VerifyGPUCode` among them: a space whose checks the plan cannot read is only replayed). Before
a space is sampled, a few draws that each of its checks turns away are replayed, and a check that
turned away a valid one is dropped for it. As MetaSchedule's, a pass is `num` draws, and passes
repeat until `min_samples` are valid; every valid schedule of those passes is returned, in draw
order. So a task gets as many fresh samples as under MetaSchedule, drawn from the same distribution
over valid schedules (the distribution MetaSchedule's code describes; its random engine skews it,
`tests/bridge/test_sampling.py`), and pays for about one replay a valid schedule (ViT-B/16's patch
embedding on the 2-core host: 49 ms a valid schedule, against 855 ms). Each pass has its own random
stream (`seed`, pass), so the result does not depend on the threads.
"""

from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from tvm.s_tir.schedule import Schedule

from bridge.space_plan import SpacePlan

__all__ = ["ConstrainedSampler"]

_COUNTS = ("passes", "draws", "turned_away", "replays", "postproc_failed", "valid")

_PROBES = 2
"""Draws each check of a space turns away that are replayed before the space is sampled: a check
that turned away one that every postprocessor passes is dropped for the space."""


class ConstrainedSampler:
    """Fresh random schedules of one task (see the module's docstring): the task's `context` (its
    module, target and postprocessors), its `design_spaces`, at least `min_samples` valid ones a call
    (MetaSchedule's `init_min_unmeasured`), on `threads` threads. `stats` adds up what the calls
    cost: passes, draws, draws turned away, replays, replays a postprocessor rejected, and valid
    schedules (the probes of `plans` not counted)."""

    def __init__(
        self, context: Any, design_spaces: list, min_samples: int, threads: int, seed: int = 0, max_fail: int = 5
    ):
        attrs = context.target.attrs
        self.mod = context.mod
        self.postprocs = list(context.space_generator.postprocs)
        self.max_shared = int(attrs.get("max_shared_memory_per_block", 0) or 0) or None
        self._max_threads = int(attrs.get("max_threads_per_block", 0) or attrs.get("max_num_threads", 0) or 1024)
        self._spaces = list(design_spaces)
        self.min_samples, self.threads, self.seed, self.max_fail = min_samples, max(1, threads), seed, max_fail
        self.passes = 0
        self.stats = dict.fromkeys(_COUNTS, 0)

    @functools.cached_property
    def plans(self) -> list[SpacePlan]:
        """Each design space's `SpacePlan`, read on first use (in the draft's thread, not at the
        task's start), its checks probed: `_PROBES` draws that each turns away are replayed, and a
        check that turned away a valid one is dropped for that space."""
        plans = []
        for index, space in enumerate(self._spaces):
            plan = SpacePlan(self.mod, space, self._max_threads)
            tiles, threads_ok = plan.draw(np.random.default_rng([self.seed, 1 << 20, index]), 512)
            shared_ok = self._shared_fits(plan, tiles, len(threads_ok))
            # the likeliest to be valid of each check's rejects: within the shared memory, and
            # the least over it
            if plan.threads_checked and self._any_valid(plan, tiles, np.flatnonzero(~threads_ok & shared_ok)):
                plan.threads_checked = False
            over = np.flatnonzero(threads_ok & ~shared_ok)
            if plan.formula_ok and len(over):
                over = over[np.argsort(plan.shared_bytes(tiles)[over], kind="stable")]
                if self._any_valid(plan, tiles, over):
                    plan.formula_ok = False
            plans.append(plan)
        return plans

    def _any_valid(self, plan: SpacePlan, tiles: list, rows: np.ndarray) -> bool:
        return any(self._replay((plan, tiles, int(row), 1))[0] is not None for row in rows[:_PROBES])

    def _shared_fits(self, plan: SpacePlan, tiles: list, count: int) -> np.ndarray:
        """Which of `count` draws fit the target's shared memory (all where the space is not checked)."""
        used = plan.shared_bytes(tiles) if self.max_shared is not None else None
        return np.ones(count, dtype=bool) if used is None else used <= self.max_shared

    def _pass(self, num: int) -> list[tuple[SpacePlan, Any, int, int]]:
        """One pass of `num` draws, each of a uniformly drawn space (as MetaSchedule's): those that
        fit, in draw order, as (plan, tiles, row, the replay's seed)."""
        rng = np.random.default_rng([self.seed, self.passes])
        self.passes += 1
        spaces = rng.integers(len(self.plans), size=num)
        jobs = []
        for index, plan in enumerate(self.plans):
            where = np.flatnonzero(spaces == index)
            if not len(where):
                continue
            tiles, fit = plan.draw(rng, len(where))
            fit &= self._shared_fits(plan, tiles, len(where))
            jobs.extend((int(where[row]), plan, tiles, int(row)) for row in np.flatnonzero(fit))
        jobs.sort(key=lambda job: job[0])
        seeds = rng.integers(1, 1 << 31, size=len(jobs))
        self.stats["passes"] += 1
        self.stats["draws"] += num
        self.stats["turned_away"] += num - len(jobs)
        return [(plan, tiles, row, int(seed)) for (_, plan, tiles, row), seed in zip(jobs, seeds)]

    def _replay(self, job: tuple[SpacePlan, Any, int, int]) -> tuple[Any, str]:
        """Replays one draw (the other decisions from `seed`) and runs the postprocessors: the
        schedule or None, and why."""
        plan, tiles, row, seed = job
        sch = Schedule(self.mod, seed=seed)
        try:
            plan.trace(tiles, row).apply_to_schedule(sch, remove_postproc=True)
        except Exception:  # noqa: BLE001 - MetaSchedule counts a replay that raises as a failure too
            return None, "postproc_failed"
        sch.enter_postproc()
        for postproc in self.postprocs:
            if not postproc.apply(sch):
                return None, "postproc_failed"
        return sch, "valid"

    def sample(self, num: int) -> list:
        """MetaSchedule's `SampleInitPopulation`: passes of `num` draws until `min_samples` of them are
        valid, or `max_fail` passes found none (counted over the call, as MetaSchedule counts them);
        every valid schedule of those passes, in draw order. Only the draws that fit are replayed: the
        passes are drawn ahead until their fitting draws are as many as the valid ones still wanted,
        replayed together, and taken up pass by pass up to the one at which MetaSchedule would stop."""
        out: list = []
        fails = 0
        with ThreadPoolExecutor(self.threads, thread_name_prefix="pruner-sample") as pool:
            while len(out) < self.min_samples and fails < self.max_fail:
                group: list[list] = []
                fitting = empty = 0
                while fitting < self.min_samples - len(out) and fails + empty < self.max_fail:
                    group.append(self._pass(num))
                    fitting += len(group[-1])
                    empty += not group[-1]
                found = iter(list(pool.map(self._replay, [job for jobs in group for job in jobs])))
                for jobs in group:  # pass by pass, as MetaSchedule counts them
                    valid = []
                    for _ in jobs:
                        sch, why = next(found)
                        self.stats[why] += 1
                        if sch is not None:
                            valid.append(sch)
                    self.stats["replays"] += len(jobs)
                    out.extend(valid)
                    fails += not valid
                    if len(out) >= self.min_samples or fails >= self.max_fail:
                        break  # the passes after it MetaSchedule would not have drawn
        return out
