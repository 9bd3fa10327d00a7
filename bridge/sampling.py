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
fetch widths, `AutoBind`'s thread extents) left to the replay, checks shared memory after the replay
where the space's formula does not hold, and keeps what every postprocessor passes. As MetaSchedule's,
a pass is `num` draws, and passes repeat until `min_samples` are valid; every valid schedule of those
passes is returned. So a task gets as many fresh samples as under MetaSchedule, drawn from the same
distribution over valid schedules (the distribution MetaSchedule's code describes; its random engine
skews it, `tests/bridge/test_sampling.py`), and pays for the valid ones' replays (ViT-B/16's patch
embedding: 12.5 ms of the 2-core host a valid schedule, against 795 ms). Each pass has its own random
stream (`seed`, pass), so the result does not depend on the threads.
"""

from __future__ import annotations

import functools
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from tvm.s_tir.schedule import Schedule

from bridge.space_plan import SpacePlan, shared_bytes

__all__ = ["ConstrainedSampler"]

logger = logging.getLogger(__name__)

MAX_PASSES = 4096
"""Passes of draws a call makes at most (about 2M draws of a 512 pass, a few seconds of numpy): a space
whose tiles almost never fit returns what it found, as MetaSchedule's sampling gives up after five
passes without a valid schedule."""

_COUNTS = ("passes", "draws", "turned_away", "replays", "over_shared", "postproc_failed", "valid")


class ConstrainedSampler:
    """Fresh random schedules of one task (see the module's docstring): the task's `context` (its
    module, target and postprocessors), its `design_spaces`, at least `min_samples` valid ones a call
    (MetaSchedule's `init_min_unmeasured`), on `threads` threads. `stats` adds up what the calls
    cost: passes, draws, draws turned away, replays, replays over the shared memory (spaces checked
    after the replay), replays a postprocessor rejected, and valid schedules."""

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
        task's start: checking a space's formula replays up to three schedules)."""
        return [SpacePlan(self.mod, space, self._max_threads) for space in self._spaces]

    def _pass(self, num: int) -> list[tuple[SpacePlan, Any, int, int]]:
        """One pass of `num` draws, each of a uniformly drawn space (as MetaSchedule's): those that
        fit, as (plan, tiles, row, the replay's seed)."""
        rng = np.random.default_rng([self.seed, self.passes])
        self.passes += 1
        spaces = rng.integers(len(self.plans), size=num)
        jobs = []
        for index, plan in enumerate(self.plans):
            count = int(np.count_nonzero(spaces == index))
            if not count:
                continue
            tiles, fit = plan.draw(rng, count)
            if self.max_shared is not None and plan.formula_ok:
                fit &= plan.shared_bytes(tiles) <= self.max_shared
            jobs.extend((plan, tiles, int(row)) for row in np.flatnonzero(fit))
        seeds = rng.integers(1, 1 << 31, size=len(jobs))
        self.stats["passes"] += 1
        self.stats["draws"] += num
        self.stats["turned_away"] += num - len(jobs)
        return [(*job, int(seed)) for job, seed in zip(jobs, seeds)]

    def _replay(self, job: tuple[SpacePlan, Any, int, int]) -> tuple[Any, str]:
        """Replays one fitting draw (the other decisions from `seed`), checks its shared memory where
        its space's formula does not hold, and runs the postprocessors: the schedule or None, and why."""
        plan, tiles, row, seed = job
        sch = Schedule(self.mod, seed=seed)
        try:
            plan.trace(tiles, row).apply_to_schedule(sch, remove_postproc=True)
        except Exception:  # noqa: BLE001 - MetaSchedule counts a replay that raises as a failure too
            return None, "postproc_failed"
        if self.max_shared is not None and not plan.formula_ok:
            used = shared_bytes(sch)
            if used is not None and used > self.max_shared:
                return None, "over_shared"
        sch.enter_postproc()
        for postproc in self.postprocs:
            if not postproc.apply(sch):
                return None, "postproc_failed"
        return sch, "valid"

    def sample(self, num: int) -> list:
        """MetaSchedule's `SampleInitPopulation`: passes of `num` draws until `min_samples` of them are
        valid, or `max_fail` passes in a row found none (passes without a draw that fits are free and
        count only towards `MAX_PASSES`); every valid schedule of those passes, in draw order. Only the
        draws that fit are replayed; the passes are drawn ahead until their fitting draws are as many
        as the valid ones still wanted (and the threads), then replayed together."""
        out: list = []
        fails = passes = 0
        with ThreadPoolExecutor(self.threads, thread_name_prefix="pruner-sample") as pool:
            while len(out) < self.min_samples and fails < self.max_fail and passes < MAX_PASSES:
                group: list[list] = []
                fitting = 0
                while fitting < max(self.min_samples - len(out), self.threads) and passes < MAX_PASSES:
                    group.append(self._pass(num))
                    fitting += len(group[-1])
                    passes += 1
                found = iter(pool.map(self._replay, [job for jobs in group for job in jobs]))
                for jobs in group:  # pass by pass, as MetaSchedule counts them
                    valid = []
                    for _ in jobs:
                        sch, why = next(found)
                        self.stats[why] += 1
                        if sch is not None:
                            valid.append(sch)
                    self.stats["replays"] += len(jobs)
                    out.extend(valid)
                    fails = 0 if valid else fails + (1 if jobs else 0)
        return out
