"""A task's fresh random schedules for a GPU target, as MetaSchedule's `SampleInitPopulation` draws
them, with the draws that `VerifyGPUCode` would reject turned away before they cost a replay.

MetaSchedule samples a schedule by replaying a design space's trace with random decisions, then runs
its postprocessors; on a CUDA target `VerifyGPUCode` rejects 97-99% of a tiled task's samples (ViT-B/16
on an H100 target: a matmul keeps 11 of 512, the patch embedding's conv 3-4), so a first draft that
wants 50 valid schedules pays for 5-15 passes of 512 replays (`benchmarks/sample_yield.py`). Most of
those rejections follow from the tile sizes alone (too many or too few threads, more shared memory
than a thread block has), and `bridge.space_plan.SpacePlan` reads from a design space's trace how.

`ConstrainedSampler.sample(num)` draws the tile decisions itself (as MetaSchedule's
`SamplePerfectTile` draws them), turns away a draw whose threads or shared memory are out of bounds,
replays the rest with the other decisions (unroll steps, fetch widths, `AutoBind`'s thread extents)
left to the replay, checks shared memory after the replay where the space's formula does not hold,
and keeps what every postprocessor passes. Rejecting only what would fail anyway, it keeps
MetaSchedule's distribution over valid schedules. A pass is `num` replays (as MetaSchedule's is),
and passes repeat until `min_samples` are valid or `max_fail` passes in a row found none. Draw `i` of
a pass has its own random stream (`seed`, pass, `i`), so the result does not depend on the threads.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from tvm.s_tir.schedule import Schedule

from bridge.space_plan import SpacePlan, shared_bytes

__all__ = ["ConstrainedSampler"]

logger = logging.getLogger(__name__)

DRAWS_A_REPLAY = 4096
"""Draws a replay may cost, at most: a space whose tiles rarely fit gets fewer replays in a pass instead
of drawing for ever (MetaSchedule would replay and reject them all)."""

_BATCH = 4096
"""Draws of a space made at once (numpy, vectorized)."""

_COUNTS = ("draws", "turned_away", "replays", "over_shared", "postproc_failed", "valid")


class ConstrainedSampler:
    """Fresh random schedules of one task (see the module's docstring): the task's `context` (its
    module, target and postprocessors), its `design_spaces`, at least `min_samples` valid ones a call
    (MetaSchedule's `init_min_unmeasured`), on `threads` threads. `stats` adds up what the calls
    cost: draws, draws turned away, replays, replays over the shared memory (spaces checked after the
    replay), replays a postprocessor rejected, and valid schedules."""

    def __init__(
        self, context: Any, design_spaces: list, min_samples: int, threads: int, seed: int = 0, max_fail: int = 5
    ):
        attrs = context.target.attrs
        self.mod = context.mod
        self.postprocs = list(context.space_generator.postprocs)
        self.max_shared = int(attrs.get("max_shared_memory_per_block", 0) or 0) or None
        max_threads = int(attrs.get("max_threads_per_block", 0) or attrs.get("max_num_threads", 0) or 1024)
        self.plans = [SpacePlan(self.mod, space, max_threads) for space in design_spaces]
        self.min_samples, self.threads, self.seed, self.max_fail = min_samples, max(1, threads), seed, max_fail
        self.passes = 0
        self.stats = dict.fromkeys(_COUNTS, 0)

    def _fitting(self, plan: SpacePlan, rng: np.random.Generator, wanted: int) -> list[tuple[SpacePlan, Any, int]]:
        """Up to `wanted` draws of `plan` that fit, as (plan, tiles, row), drawn in batches until
        `wanted` fit or `DRAWS_A_REPLAY` draws a wanted one were made."""
        out: list[tuple[SpacePlan, Any, int]] = []
        drawn = 0
        while len(out) < wanted and drawn < DRAWS_A_REPLAY * wanted:
            tiles, fit = plan.draw(rng, _BATCH)
            if self.max_shared is not None and plan.formula_ok:
                fit &= plan.shared_bytes(tiles) <= self.max_shared
            rows = np.flatnonzero(fit)[: wanted - len(out)]
            out.extend((plan, tiles, int(r)) for r in rows)
            # the draws after the last one kept were not needed
            drawn += int(rows[-1]) + 1 if len(out) == wanted else _BATCH
        self.stats["draws"] += drawn
        self.stats["turned_away"] += drawn - len(out)
        return out

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
        """Passes of `num` replays until `min_samples` schedules are valid (or `max_fail` passes in a
        row found none); the valid ones, in draw order."""
        out: list = []
        fails = 0
        with ThreadPoolExecutor(self.threads, thread_name_prefix="pruner-sample") as pool:
            while len(out) < self.min_samples and fails < self.max_fail:
                rng = np.random.default_rng([self.seed, self.passes])
                self.passes += 1
                spaces = rng.integers(len(self.plans), size=num)  # as MetaSchedule: a space a replay
                jobs = [
                    job
                    for index, plan in enumerate(self.plans)
                    for job in self._fitting(plan, rng, int(np.count_nonzero(spaces == index)))
                ]
                seeds = rng.integers(1, 1 << 31, size=len(jobs))
                found = list(pool.map(self._replay, [(*job, int(seed)) for job, seed in zip(jobs, seeds)]))
                self.stats["replays"] += len(jobs)
                for _, why in found:
                    self.stats[why] += 1
                valid = [sch for sch, _ in found if sch is not None]
                out.extend(valid)
                fails = 0 if valid else fails + 1
        return out
