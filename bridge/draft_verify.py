"""Pruner's draft-then-verify search on MetaSchedule (docs/pruner.md section 5), made cheap.
(Over 400 lines: drafting, verifying and the frame's hooks share one round's state.)

Per task and round:

1. Draft, only when the potential space runs low (fewer unmeasured schedules than `redraft_below` x
   `potential_size`, for a first draft's space x the most it can hold, or than one batch; or every
   `redraft_every`-th round when that is set, as published; or, with `redraft_stall`, when the
   task's best latency has not improved for that many measured rounds, a wait that `redraft_backoff`
   doubles after each such draft that found nothing better, `bridge.stall_rule`, and held while it
   would take the run's drafting over `redraft_share` of its time; with `draft_ahead` such a stall
   draft runs alongside the rounds, `bridge.drafting`; with `low_draft_ahead` a space under
   `redraft_below` that still fills a batch is drafted for the same way, and only one that cannot
   drafts in turn): evolve a population for `draft_generations` generations scored by the draft
   model (PSA) and keep the best `potential_size` distinct, never-measured schedules as the
   potential space. The first draft samples its whole population (`first_draft_population`, by
   default the population) from the design space (a share `init_measured_ratio` replayed from the
   task's best measured records); later drafts start from the previous draft's evolved population,
   minus what was measured since, and sample only `resample_ratio` of the population afresh (until
   `redraft_min_samples` of them are valid). Sampling and evolution are MetaSchedule's own C++
   (`SampleInitPopulation`, `EvolveWithCostModel`) on inner `EvolutionarySearch` objects that this
   strategy owns; they, not PSA, were three quarters of a published-size draft (docs/benchmarks.md).
   A first draft whose samples drew the task's whole space (`bridge.drafting.enumerated`: an
   injective task's handful of thread extents) ranks them unevolved; its verify does not evolve
   them and no later draft is made, so once they are measured the task is done.
2. Verify: the verify model (the tuning run's cost model, e.g. PAM) ranks the potential space;
   then its best `verify_pool` plus the best measured schedules (`pool_measured_ratio` of them)
   evolve `verify_generations` more generations scored by the verifier.
3. Pick the verifier's top n, with an epsilon-greedy share (`eps_greedy`) of random samples from
   the draft's fresh samples and a `local_share` (a quarter by default) of local moves: one-mutation
   neighbours of the task's `local_parents` best measured schedules, best first by the verifier.
Cold start: while the verifier scores every schedule the same (no data yet), the potential space
is measured in PSA's order.

Draft and verifier share one `data.features.FeatureCache` (the tuning run's), so a schedule that
PSA walked is not lowered and walked again when PAM ranks it or learns from its measurement.

With a `bridge.pipeline.Pipeline`, steps 1-3 of round k+1 run on a background thread while round
k builds and runs, and (with its `PrefetchBuilder`) round k+1's picks are built there too; the log
then shows the search's own seconds (`draft_s`, `verify_s`) and the seconds the tuning loop waited
on it (`wait_s`).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from tvm.ir.utils import derived_object

from bridge.drafting import _EVOLVE, Draft, DraftResult, with_threads
from bridge.fill_rule import FillRule
from bridge.pipeline import Pipeline
from bridge.sampling import ConstrainedSampler
from bridge.search import _UNLIMITED, CountingCostModel, _distinct, _key, _pairs, _ResumableSearch, candidate
from bridge.search_log import SearchLog
from bridge.size_filter import SizeFilter, check_limit
from bridge.stall_rule import DraftLedger, StallRule
from bridge.verify_gate import VerifyGate
from data.labels import mean_latency
from data.replay import ReplayMemo
from pruner_models.blend import check_weight
from tvm_env import is_gpu, ms

__all__ = ["FIRST_DRAFT_MIN_SAMPLES", "DraftVerifySearch"]

FIRST_DRAFT_MIN_SAMPLES = 50
"""Valid fresh samples the first draft keeps sampling for: MetaSchedule's `init_min_unmeasured`."""


Pairs = list[tuple[int, Any]]
"""(schedule key, schedule) pairs, so a schedule is hashed once however many rounds it waits."""


_SUMMED = tuple("draft_scored verify_scored draft_s sample_s samples verify_s psa_s verifier_s local".split())
"""Search statistics that add up over two searches of one batch (the rest: the first search's, `drafted` either's)."""


def _merged(stats: dict, extra: dict) -> dict:
    """The statistics of a batch searched in two parts (`search_ahead` 2 topping up a queued batch)."""
    out = dict(stats)
    for key in _SUMMED:
        if key in extra:
            out[key] = out.get(key, 0.0) + extra[key]
    out["drafted"] = max(out.get("drafted", 0), extra.get("drafted", 0))
    out["draft_spans"] = [*out.get("draft_spans", ()), *extra.get("draft_spans", ())]  # each search's drafts
    return out


@derived_object
class DraftVerifySearch(_ResumableSearch):
    """Pruner's draft-then-verify search (module docstring); the tuning run's cost model verifies."""

    def __init__(
        self,
        *,
        draft: Any,
        population_size: int = 512,
        potential_size: int = 256,
        draft_generations: int = 2,
        first_draft_generations: int | None = None,
        first_draft_population: int | None = None,
        first_draft_min_samples: int = FIRST_DRAFT_MIN_SAMPLES,
        constrained_sampling: bool = True,
        verify_generations: int = 1,
        first_verify_generations: int | None = None,
        verify_pool: int = 128,
        mutation_prob: float = 0.85,
        redraft_every: int = 0,
        redraft_below: float = 0.5,
        redraft_stall: int = 3,
        redraft_backoff: bool = False,
        redraft_share: float | None = 0.15,
        resample_ratio: float = 0.25,
        redraft_min_samples: int = 8,
        init_measured_ratio: float = 0.2,
        pool_measured_ratio: float = 0.1,
        eps_greedy: float = 0.1,
        local_share: float = 0.25,
        local_parents: int = 8,
        quick_start: bool = False,
        draft_rounds: int = 0,
        verify_gate: bool = False,
        psa_weight: float = 0.0,
        fill_device: int = 64,
        draft_ahead: bool = True,
        low_draft_ahead: bool = True,
        first_drafts_ahead: int = 2,
        first_draft_threads: int | None = None,
        first_verify_ahead: bool = True,
        draft_nice: int = 0,
        search_ahead: int = 2,
        size_filter_kb: float | None = None,
        pipeline: Pipeline | None = None,
        log: SearchLog | None = None,
        ledger: DraftLedger | None = None,
        replays: ReplayMemo | None = None,
        loggers: dict[str, logging.Logger] | None = None,
    ):
        """
        Args:
            draft: the draft cost model (a `bridge.psa.PSACostModel`; any MetaSchedule cost model works).
            population_size: schedules a draft evolves (published: 1536; 512 here: on MetaSchedule's
                sampling, the published size made the first draft a quarter of a 100 s tuning run).
            potential_size: best distinct unmeasured schedules the draft keeps (published: 512 of 1536).
            draft_generations: evolution generations scored by the draft model (published: 2).
            first_draft_generations: a task's first draft's generations (None: `draft_generations`).
                The first draft is most of a task's first batch: 13.3 s of 19.0 s on the GPU suite,
                about 7 s of it the evolution (docs/benchmarks.md, "Where the 3x bar is").
            first_draft_population: a task's first draft's population (None: `population_size`):
                the fresh samples it asks for in a pass and the children of each generation. A
                network's first drafts all come before any task's second round (MetaSchedule's task
                scheduler gives every task one round first).
            first_draft_min_samples: valid fresh samples the first draft keeps sampling for
                (MetaSchedule's `init_min_unmeasured`, 50); a pass asks for the population's worth.
            constrained_sampling: on a GPU target, a task's first draft samples through
                `bridge.sampling.ConstrainedSampler`: MetaSchedule's `SampleInitPopulation`, as many
                valid samples of the same distribution, with the draws whose threads or shared memory
                would fail `VerifyGPUCode` turned away before a replay. False, or another target:
                MetaSchedule's own.
            verify_generations: further generations scored by the verify model (published: 1; 0 =
                only rank the potential space).
            first_verify_generations: a task's first verify's generations (None: `verify_generations`).
                A pretrained verifier's first verifies cost 4-22 s a task on ResNet-50 on the GPU
                machine, most of it scoring its generation's children; a cold one is skipped anyway.
            verify_pool: the verifier's best this-many of the potential space are the parents of
                its generations (published: the whole potential space and the random samples); a
                first verify ahead takes at most what a full first space holds.
            mutation_prob: probability that a child is a mutation rather than a copy (published: 0.85).
            redraft_every: 0 = draft when the potential space runs low (`redraft_below`); k > 0 =
                also draft every k-th round of the task (published: 2).
            redraft_below: draft when fewer than this share of `potential_size` is left unmeasured
                (of a first draft's space: of `min(potential_size, first_draft_population)`).
            redraft_stall: k > 0 = also draft when the task's best has not improved in its last k
                measured rounds (0: never). The potential space rarely runs low (the verifier breeds
                from it), so without this a run may spend its budget around its first draft.
            redraft_backoff: double the wait for the next draft on a stall after each one that found
                nothing better; back to `redraft_stall` on a new best (`bridge.stall_rule`).
            redraft_share: a draft due on a stall waits while it would take the run's drafting (every
                draft's own seconds, all tasks') over this share of the run's time, the next draft
                reckoned to last as long as the task's last one (`bridge.stall_rule.DraftLedger`,
                shared by this strategy's clones); None: no limit. The first draft and drafts for a
                potential space that cannot fill a batch (without `low_draft_ahead`: that ran under
                `redraft_below`) are never held. On the GPU suite 0.15 cut drafting to 8-21%
                of the run from 20-40% and the device's idle time by 4-11 points on the four operators
                where stall drafts were due, latency level (1.005x the unlimited run's over 8 paired
                seeds: the dense layer 5-6% slower, the depthwise conv 4-7% faster; docs/benchmarks.md,
                "The drafting share on the GPU").
            resample_ratio: share of the population sampled afresh by a re-draft (the rest is the
                previous draft's evolved population and the best measured schedules).
            redraft_min_samples: a re-draft samples `resample_ratio` of the population afresh again
                and again until this many are valid (MetaSchedule's `init_min_unmeasured`; the first
                draft keeps its 50). On GPU targets most random schedules fail a postprocessor: a
                depthwise conv's re-draft on an H200 machine got 50-61 valid of 256-512 asked, and
                its sampling took 8-13 s of a 20-27 s draft. At 8, about one pass: 2.1 s of a 15 s
                re-draft there, and on the host 4.4-6.0 s of 40-42 s against 20-26 s of 57-64 s
                (docs/benchmarks.md, "Fewer fresh samples a re-draft"). 50: as MetaSchedule.
            init_measured_ratio: share of the draft's population replayed from the best measured records.
            pool_measured_ratio: share of the measured records (at most this share of the population)
                added to the verifier's parents (published: 10%, up to 153).
            eps_greedy: share of each batch measured at random from the draft's samples (published: 0.1).
            local_share: share of each batch given to local moves (`_local`): children of one
                generation of mutation (MetaSchedule's mutators: a tile size, an unroll step, a compute
                location) from the task's `local_parents` best measured schedules, best first by the
                verifier (by the draft model while the verifier is cold or gated), the share the
                verifier's picks leave; 0 = none. On the GPU suite Pruner spread its trials over
                515-871 tilings after its early lead and put 0-2% of them on its best's tiling, while
                XGB's evolution stayed around its best (docs/benchmarks.md, "Why Pruner plateaus").
                0.25 (default) ended at 0.87x and 0.97x Pruner's latency on the 3x3 and depthwise
                convs of the GPU suite, in one job each (docs/benchmarks.md, "Local moves on the GPU").
            local_parents: how many of the best measured schedules parent the local moves.
            quick_start: the first draft ranks its fresh samples unevolved (the first batch comes
                sooner) and the next draft, due at once, evolves them: with `draft_ahead`, alongside,
                never held by `redraft_share`, while the rounds measure the ranked samples (in turn,
                the next round's search waited for that evolution, and so did the first batch's
                results: a search ahead must end before a round's results are taken in). Off by
                default: on an H100, before drafts ran alongside, the second batch came later
                (docs/benchmarks.md, "Ablation: quick start ...").
            draft_rounds: a task's first k searches pick from the potential space in the draft's order
                without asking the verifier, as a cold verifier's first rounds do (`cold_start` in the
                log). A pretrained verifier (MoA) spent 4.5 s and 3 s of verifying in its first two rounds
                on the GPU, where Pruner's cold one spent 0.1-0.3 s, and its first batch came 5-11 s
                later (docs/benchmarks.md, "MoA's random share on the 3x3 conv ..."). 0: off.
            verify_gate: rank the potential space by the draft model while it has ordered the run's
                measured batches better than the verifier (`bridge.verify_gate`). Off by default here,
                since the search cannot see which cost model MetaSchedule hands it; pass True with a
                pretrained verifier (`tune.py` and `tune_tasks` do so for the pretrained modes).
            psa_weight: w > 0 = the verifier ranks and evolves by its scores blended with PSA's,
                z(verifier) + w z(log PSA) within the round (`CountingCostModel`'s `blend_with`); 0 = its own.
            fill_device: k > 0 = with a pipeline, grow a task's batches (up to k trials) until running
                one lasts as long as the host's search and build of the next (`bridge.fill_rule`);
                0 = every batch has the run's trials per round.
            draft_ahead: a re-draft due on a stall (`redraft_stall`) runs on a thread of its own while
                this round verifies the current potential space; a later round takes it up
                (`bridge.drafting`; see `low_draft_ahead`). The first draft, and drafts for a space
                that cannot fill a batch, run in turn.
            low_draft_ahead: a draft due because the potential space ran under `redraft_below` while
                it still fills the round's batch is drafted for as a stall is: held under
                `redraft_share`, and with `draft_ahead` run alongside; a draft running alongside is
                taken up once it is done, or when the space can no longer fill a batch (it is then
                waited for). On the GPU suite (10 seed pairs over four operators, each pair in one
                call) drafting fell to 6-10% of every arm from 8-24%, the depthwise conv ran no
                re-draft in 225 s instead of one or two in turn, and latency was level (0.987x as a
                geometric mean; docs/benchmarks.md, "Drafting for a low potential space alongside").
                False: such a draft runs in turn and is never held, and a draft running alongside is
                taken up by the next round, done or not (the default before 2026-11-28, third session).
            first_drafts_ahead: k > 0 = with a pipeline, the first draft starts on a thread of its own
                when the run starts (`pre_tuning`, which MetaSchedule calls for every task before
                any round), at most k of the run's tasks at once (`Pipeline.draft_slots`); the task's
                first round takes it up. A network's tasks then draft side by side instead of one
                after another as their first rounds come (ResNet-50's four drafted 12-21 s each, and
                its first batches ended 88-90 s into the run on an H200 machine; with k = 2 it reached
                XGB's final 3.36x sooner against 2.52x, three seeds). 0: in turn. One task: no change.
                2 here, each on the task's threads: this class does not know the run's tasks, and four
                first drafts of all the cores each drafted no faster (docs/benchmarks.md, "Four first
                drafts at once on the GPU"). `tune.py` and `bridge.tuning.tune_tasks` pass 4
                (`SearchConfig`, since 2026-12-01) with the cores shared among them: with 4 threads
                each, ResNet-18's 19 tasks on one H200 had every first round done at 218 s against
                221-248 s (one seed).
            first_draft_threads: threads a task's first draft samples, evolves and featurizes on (a
                copy of the task's context with that many, `bridge.drafting.with_threads`; None: the
                task's own, the host's cores). `bridge.tuning.tune_tasks` sets an unset one to the
                cores shared among the first drafts at once (`bridge.factory.resolve_first_draft_threads`).
                On one H200 machine's 16 cores, one first draft took 20.9 s on 16 threads and 22.6 s
                on 8, and four at once on 4 threads each drafted 4.5-5.0 a minute against 3.4-3.5 for
                two at once on 16 (`benchmarks/draft_contention.py`).
            first_verify_ahead: with `first_drafts_ahead`, the first draft's thread also ranks the
                draft's potential space by the verifier, as the task's first round would (the same
                verifier, nothing measured yet), and that round takes the ranking up. A network's first
                verifies then run beside the other tasks' drafts instead of one after another in the
                tuning loop: a pretrained verifier (MoA) took 4.3-15.2 s a task on ResNet-50's four in
                its first round on an H200 machine, and its first batches ended 31-37 s after Pruner's,
                whose cold verifier takes 0.1-0.5 s (docs/benchmarks.md, "MoA beside Pruner on every
                workload"). Skipped when the first round would not ask the verifier (`draft_rounds`,
                `quick_start`) or when the task has measurements from an earlier run. One task: no change.
            draft_nice: n in 1-19 = a draft alongside the rounds (a stall or low re-draft, a first draft
                ahead, not the first verify after it) runs n steps of nice lower in CPU priority than
                the builds and the next batch's search (`bridge.drafting.lower_priority`; Linux). Its
                PSA walk runs in the walk pool's processes, at their priority. 0: the same priority.
            search_ahead: with a pipeline, how many rounds ahead of the batch running on the device the
                search works. 2: the batch after the next is searched while the next one builds
                (`PrefetchBuilder.start`), so a round lasts the longer of the two; the price is one
                more round of staleness (the verifier picks a batch without the last two batches'
                results). On the GPU suite (7 seed pairs, one call each) the device idled 5-23
                points less on 6 of 7 seeds, the arms measured 1.07-1.9x the trials, and the
                latency at equal time was level (1.003x) (docs/benchmarks.md, "Searching while the
                batch before builds"). 1: the next batch is searched, then built, while the current
                one runs, so a round lasts at least its search plus its build (the default before
                2026-11-27).
            size_filter_kb: pass over picks whose CUDA source is estimated over this many KB before
                they take batch slots (`bridge.size_filter`; None: off). The builder's
                `max_source_kb` is the value that matches it: those picks would be refused there.
            pipeline: search (and build) the next round in the background (`bridge.pipeline`);
                None: rounds in turn, as MetaSchedule runs them.
            log: where rounds are logged (None: nowhere).
            ledger: the run's drafting account (None: a new one; clones share it).
            replays: the run's `data.replay.ReplayMemo`: a resumed task's records, replayed once for its
                cost model's catch-up and its measured set (None: each replays them).
            loggers: the run's MetaSchedule logger of each task, by task name (`tvm_env.task_loggers`),
                for a first draft on a context of its own (`first_draft_threads`), which TuneContext's
                logger cannot be read back for; None or a task not in it: warnings only.
        """
        super().__init__(log=log, replays=replays)
        for name, value in [
            ("population_size", population_size),
            ("potential_size", potential_size),
            ("verify_pool", verify_pool),
            ("redraft_min_samples", redraft_min_samples),
            ("first_draft_population", population_size if first_draft_population is None else first_draft_population),
            ("first_draft_min_samples", first_draft_min_samples),
            ("local_parents", local_parents),
        ]:
            if value < 1:
                raise ValueError(f"{name}={value!r} must be >= 1")
        for name, value in [
            ("draft_generations", draft_generations),
            (
                "first_draft_generations",
                draft_generations if first_draft_generations is None else first_draft_generations,
            ),
            ("verify_generations", verify_generations),
            (
                "first_verify_generations",
                verify_generations if first_verify_generations is None else first_verify_generations,
            ),
            ("redraft_every", redraft_every),
            ("redraft_stall", redraft_stall),
            ("fill_device", fill_device),
            ("first_drafts_ahead", first_drafts_ahead),
            ("draft_nice", draft_nice),
            ("draft_rounds", draft_rounds),
        ]:
            if value < 0:
                raise ValueError(f"{name}={value!r} must be >= 0")
        for name, value in [
            ("mutation_prob", mutation_prob),
            ("redraft_below", redraft_below),
            ("resample_ratio", resample_ratio),
            ("init_measured_ratio", init_measured_ratio),
            ("pool_measured_ratio", pool_measured_ratio),
            ("eps_greedy", eps_greedy),
            ("local_share", local_share),
        ]:
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name}={value!r} must be in [0, 1]")
        check_weight(psa_weight, f"psa_weight={psa_weight!r}")
        if search_ahead not in (1, 2):
            raise ValueError(f"search_ahead={search_ahead!r} must be 1 or 2")
        if first_draft_threads is not None and first_draft_threads < 1:
            raise ValueError(f"first_draft_threads={first_draft_threads!r} must be >= 1 (None: the task's threads)")
        if draft_nice > 19:
            raise ValueError(f"draft_nice={draft_nice!r} must be in 0-19")
        check_limit(size_filter_kb)
        if redraft_share is not None and not 0.0 < redraft_share <= 1.0:
            raise ValueError(f"redraft_share={redraft_share!r} must be in (0, 1] (None: no limit)")
        if potential_size > population_size:
            raise ValueError(f"potential_size={potential_size!r} must be <= population_size={population_size!r}")
        self.draft, self.pipeline = draft, pipeline
        self.ledger = ledger if ledger is not None else DraftLedger()
        self.loggers = loggers if loggers is not None else {}
        self.options = dict(
            population_size=population_size,
            potential_size=potential_size,
            draft_generations=draft_generations,
            first_draft_generations=first_draft_generations,
            first_draft_population=first_draft_population,
            first_draft_min_samples=first_draft_min_samples,
            constrained_sampling=constrained_sampling,
            verify_generations=verify_generations,
            first_verify_generations=first_verify_generations,
            verify_pool=verify_pool,
            mutation_prob=mutation_prob,
            redraft_every=redraft_every,
            redraft_below=redraft_below,
            redraft_stall=redraft_stall,
            redraft_backoff=redraft_backoff,
            redraft_share=redraft_share,
            resample_ratio=resample_ratio,
            redraft_min_samples=redraft_min_samples,
            init_measured_ratio=init_measured_ratio,
            pool_measured_ratio=pool_measured_ratio,
            eps_greedy=eps_greedy,
            local_share=local_share,
            local_parents=local_parents,
            quick_start=quick_start,
            draft_rounds=draft_rounds,
            verify_gate=verify_gate,
            psa_weight=psa_weight,
            fill_device=fill_device,
            draft_ahead=draft_ahead,
            low_draft_ahead=low_draft_ahead,
            first_drafts_ahead=first_drafts_ahead,
            first_draft_threads=first_draft_threads,
            first_verify_ahead=first_verify_ahead,
            draft_nice=draft_nice,
            search_ahead=search_ahead,
            size_filter_kb=size_filter_kb,
        )
        self.__dict__.update(self.options)

    def clone(self) -> DraftVerifySearch:
        return DraftVerifySearch(
            draft=self.draft,
            pipeline=self.pipeline,
            log=self.log,
            ledger=self.ledger,
            replays=self.replays,
            loggers=self.loggers,
            **self.options,
        )

    @classmethod
    def from_config(
        cls,
        search: Any,
        *,
        log: SearchLog | None = None,
        features: Any = None,
        pipeline: Pipeline | None = None,
        replays: ReplayMemo | None = None,
        loggers: dict[str, logging.Logger] | None = None,
    ) -> DraftVerifySearch:
        """The search of a `bridge.config.SearchConfig` (psa set): PSA on that device row drafts.

        Args:
            search: the SearchConfig.
            log: where rounds are logged.
            features: the run's `data.features.FeatureCache`, shared with the verifier.
            pipeline: the run's `Pipeline` (None: no pipelining).
            replays: the run's `data.replay.ReplayMemo` (None: none).
            loggers: the run's MetaSchedule logger of each task, by task name (None: none).
        """
        from bridge.psa import PSACostModel

        return cls(
            draft=PSACostModel(
                device=search.psa, formula=search.psa_formula, devices_file=search.psa_devices, features=features
            ),
            population_size=search.population or 512,
            potential_size=search.potential,
            draft_generations=search.draft_generations,
            first_draft_generations=search.first_draft_generations,
            first_draft_population=search.first_draft_population,
            first_draft_min_samples=search.first_draft_min_samples,
            constrained_sampling=search.constrained_sampling,
            verify_generations=search.verify_generations,
            first_verify_generations=search.first_verify_generations,
            verify_pool=search.verify_pool,
            redraft_every=search.redraft_every,
            redraft_stall=search.redraft_stall,
            redraft_backoff=search.redraft_backoff,
            redraft_share=search.redraft_share,
            resample_ratio=search.resample_ratio,
            redraft_min_samples=search.redraft_min_samples,
            eps_greedy=search.eps_greedy,
            local_share=search.local_share,
            local_parents=search.local_parents,
            quick_start=search.quick_start,
            draft_rounds=search.draft_rounds,
            verify_gate=bool(search.verify_gate),  # unset: off (make_strategy resolves it from the cost model)
            psa_weight=search.psa_weight,
            fill_device=search.fill_device,
            draft_ahead=search.draft_ahead,
            low_draft_ahead=search.low_draft_ahead,
            first_drafts_ahead=search.first_drafts_ahead,
            first_draft_threads=search.first_draft_threads,
            first_verify_ahead=search.first_verify_ahead,
            draft_nice=search.draft_nice,
            search_ahead=search.search_ahead,
            size_filter_kb=search.size_filter_kb,
            pipeline=pipeline,
            log=log,
            replays=replays,
            loggers=loggers,
        )

    # ------------------------------------------------------------------------------------------
    # Frame hooks

    def _start(self) -> None:
        self.ledger.open()
        self.draft_model = CountingCostModel(model=self.draft)  # the drafts' own: a draft may run alongside
        self.verify_model = CountingCostModel(model=self.cost_model)
        self.ranker = (  # what ranks the potential space and scores the verifier's generations
            CountingCostModel(
                model=self.verify_model,
                cache=False,
                blend_with=CountingCostModel(model=self.draft),
                blend_weight=self.psa_weight,
            )
            if self.psa_weight > 0
            else self.verify_model
        )
        self.drafter = self._evolutionary_search(self.population_size, self.draft_generations, self.draft_model)
        population, min_samples = self._first_population, self.first_draft_min_samples
        generations = self.draft_generations if self.first_draft_generations is None else self.first_draft_generations
        threads = self.first_draft_threads
        self.first_context = (  # what the first draft samples, evolves and featurizes on
            with_threads(self.context, threads, self.loggers.get(self.task_name))
            if threads is not None and threads != int(self.context.num_threads)
            else self.context
        )
        differs = self.first_context is not self.context or (population, generations, min_samples) != (
            self.population_size,
            self.draft_generations,
            FIRST_DRAFT_MIN_SAMPLES,
        )
        self.first_drafter = (  # a task's first draft, when it differs from the rest
            self._evolutionary_search(
                population, generations, self.draft_model, min_samples=min_samples, context=self.first_context
            )
            if differs
            else self.drafter
        )
        self.first_sampler = (  # what a task's first draft samples with (default: `first_drafter`)
            ConstrainedSampler(
                self.first_context,
                self.design_spaces,
                min_samples,
                threads=int(self.first_context.num_threads),
                seed=int(self.context.rand_state),
            )
            if self.constrained_sampling and is_gpu(self.context.target)
            else self.first_drafter
        )
        self.resampler = (  # the re-drafts' fresh samples, when they need fewer valid ones than the first draft
            self._evolutionary_search(self.population_size, 0, self.draft_model, min_samples=self.redraft_min_samples)
            if self.redraft_min_samples != FIRST_DRAFT_MIN_SAMPLES
            else self.drafter
        )
        self._potential: Pairs = []
        self._population: list = []  # the last draft's evolved population, seed of the next draft
        self._samples: Pairs = []  # the last draft's fresh samples, for the epsilon-greedy share
        self._ready: tuple[list | None, dict] | None = None  # a batch searched ahead, with its stats
        self._queued: tuple[list | None, dict] | None = None  # the batch after it (`search_ahead` 2), unbuilt
        self._reserved: set[int] = set()  # keys of picks searched ahead and not yet handed out
        self._deferred: Pairs = []  # picks whose build a prefetch left running, for the next batch
        self._background: Draft | None = None  # a stall draft running alongside (`draft_ahead`)
        self._best: dict[int, tuple[float, Any]] = {}  # measured schedules: key -> (latency, schedule)
        self._seeded = False  # whether `_best` holds the database's best records of earlier runs
        self._waited = 0.0  # seconds the loop waited on the search since the last batch was handed out
        self._own_job = None  # this task's last job in the pipeline (`Pipeline.submit`)
        self._drafts = 0
        self._searches = 0  # searches of the task so far (`draft_rounds`)
        self._verified = False  # whether the task has verified once (`first_verify_generations`)
        self._last_draft_s = 0.0  # the task's last draft's own seconds, what the next is reckoned to take
        self._stall = StallRule(self.redraft_stall, backoff=self.redraft_backoff, best=self.best_before)
        self._unevolved = False  # the potential space is a quick start's unevolved samples
        self._enumerated = False  # the first draft drew the task's whole space: no draft finds more
        self._gate = VerifyGate() if self.verify_gate else None
        self._size = SizeFilter(self.size_filter_kb, self.context.target) if self.size_filter_kb else None
        self._fill = FillRule(self.per_round, self.fill_device if self.pipeline is not None else 0)
        if self.first_drafts_ahead and self.pipeline is not None and self.budget > 0:  # the first round takes it up
            self._stall.drafted(on_stall=False)
            self._background = self._new_draft(then=self._first_ranking())
            self._background.start(slots=self.pipeline.draft_slots(self.first_drafts_ahead))

    @property
    def potential(self) -> list:
        """The task's current potential space, best draft score first."""
        return [s for _, s in self._potential]

    def _propose(self, n: int) -> list | None:
        # With `Pipeline.build_apart` a task waits for its own jobs only: another task's job in flight
        # may go on while this batch, built already, runs. A batch searched here waits for them all.
        apart = self.pipeline is not None and self.pipeline.build_apart
        waited = self._waited + self._join(self._own_job if apart else None)
        if apart and self._ready is None:
            waited += self._join()
        self._waited = 0.0
        start = time.perf_counter()
        ready, self._ready = self._ready, None
        self._reserved = set()
        picks, stats = ready if ready is not None else self._search(n)
        if self.log is not None:
            self.log.note_search(self.task_name, wait_s=waited + time.perf_counter() - start, **stats)
        return picks

    def _ahead(self, n: int, later: int = 0) -> None:
        if self.pipeline is None:
            return
        target, builder = self.context.target, self.pipeline.builder
        queued, self._queued = self._queued, None
        start = time.perf_counter()
        build_start = start

        def search() -> None:
            nonlocal build_start
            # a batch searched ahead that found nothing is searched again when picks were left building since
            ready = queued if queued is not None and (queued[0] or not self._deferred) else self._search(n)
            build_start = time.perf_counter()
            if self.search_ahead == 1:
                self._ready = ready
                return
            picks, stats = ready
            picks = picks[:n] if picks else picks
            self._reserved = {_key(s) for s in picks or []}
            if picks and len(picks) < n:  # searched before the batches grew (`fill_device`): top it up
                more, extra = self._search(n - len(picks))
                picks = picks + (more or [])
                stats = _merged(stats, extra)
                self._reserved |= {_key(s) for s in more or []}
            self._ready = (picks, stats)
            if picks and builder is not None:  # it builds while the batch after it is searched
                builder.start([s.mod for s in picks], target)
            if picks and later > 0 and not self._expired():
                self._queued = self._search(min(self.batch, later))

        def build(_) -> None:
            picks, stats = self._ready
            if picks and builder is not None:
                _, pending, built = builder.prefetch([s.mod for s in picks], target)
                stats.update(built, prebuild_s=time.perf_counter() - build_start, deferred=len(pending))
                if pending:  # still building: they go first in the next batch (`_search`)
                    left = set(pending)
                    self._deferred = [(_key(s), s) for i, s in enumerate(picks) if i in left]
                    self._ready = ([s for i, s in enumerate(picks) if i not in left], stats)
            stats["job_s"] = time.perf_counter() - start
            self._fill.observe_job(stats["job_s"])

        self._own_job = self.pipeline.submit(search, build)

    def _next_batch(self, current: int) -> int:
        return self._fill.next(current)

    def _notify(self, measure_candidates, results) -> None:
        # The search must be done before MetaSchedule's callbacks update the cost model and the
        # database; the build of its picks may go on. The time waited is this round's search cost.
        if self.pipeline is not None:
            self._waited += self.pipeline.join_search()
        self._fill.observe_device(self.device_s, len(results))
        latencies = [mean_latency(r.run_secs) if r.error_msg is None else math.inf for r in results]
        for c, latency in zip(measure_candidates, latencies):
            if math.isfinite(latency):
                self._best[_key(c.sch)] = (latency, c.sch)
        if len(self._best) > 2 * self._best_kept:  # no round asks for more than the best _best_kept
            self._best = dict(self._sorted_best()[: self._best_kept])
        if self._gate is not None:  # both models score the batch before the verifier learns from it
            verifier, draft = (m.predict(self.context, measure_candidates) for m in (self.cost_model, self.draft))
            self._gate.observe(verifier, draft, latencies)
        self._stall.observe(latencies)

    def _finish(self) -> None:
        self.ledger.close()
        self._join()
        if self._background is not None:  # its C++ evolution must end before the drafter's state does
            self._background.result()
        self._ready, self._queued, self._deferred, self._background = None, None, [], None
        self.drafter.post_tuning()
        for other in (self.resampler, self.first_drafter):  # each its own search, or the drafter itself
            if other is not self.drafter:
                other.post_tuning()
        self.first_context = self.context  # a first draft's own context (`first_draft_threads`) is done with

    def _join(self, upto: Any = None) -> float:
        return 0.0 if self.pipeline is None else self.pipeline.join(upto)

    # ------------------------------------------------------------------------------------------
    # One round's search

    def _search(self, n: int) -> tuple[list | None, dict]:
        """Draft (when due), verify and pick `n` schedules; (picks or None when exhausted, stats)."""
        start = time.perf_counter()
        verify_before, verifier_before = self.verify_model.scored, self.verify_model.seconds
        stats: dict = {"drafted": 0, "draft_scored": 0, "psa_s": 0.0}
        background_s = waited = verify_ahead_s = 0.0
        ranked_ahead = None
        spans: list[tuple[float, float]] = []  # the drafts this search took up or ran (time.perf_counter)
        stats["draft_spans"] = spans
        self._potential = self._unmeasured(self._potential)
        must, early = self._draft_needed(n)
        background = self._background
        if background is not None and (must or not self.low_draft_ahead or background.done()):
            # a draft started alongside: take it up (with `low_draft_ahead`, once it is done or needed)
            result, waited = background.result()
            self._background = None
            background_s = result.stats["draft_s"]
            stats.update(self._take(result), drafted=1, draft_wait_s=waited)
            spans.append(result.stats["draft_span"])
            if result.ranking is not None:  # the first verify, done on the draft's thread
                ranked_ahead, verify_ahead_s, verifier_ahead_s, scored_ahead = result.ranking
                # the counters from here on, with what the draft's thread verified counted as this round's
                verify_before = self.verify_model.scored - scored_ahead
                verifier_before = self.verify_model.seconds - verifier_ahead_s
            self._potential = self._unmeasured(self._potential)
            must, early = self._draft_needed(n)
        # `early` (`low_draft_ahead`): a space under `redraft_below` that still fills the batch is
        # drafted for as a stall is, under the share and alongside
        stalled = not must and not early and not stats["drafted"]
        if self._background is not None:
            pass  # a draft is running alongside: the rounds verify the current space until it is done
        elif self._enumerated:
            pass  # the first draft drew the whole space: once it is measured the task is done
        elif (early or stalled) and not self._unevolved and not self._share_allows():
            stats["draft_held"] = int(early or self._stall.window_full)
        elif must or early or (stalled and self._stall.due()):
            self._stall.drafted(on_stall=not must and not early)
            draft = self._new_draft()
            if self.draft_ahead and not must:  # this round verifies the current space meanwhile
                draft.start()
                self._background = draft
                stats["draft_started"] = 1
            else:
                result = draft.run()
                stats.update(self._take(result), drafted=1)
                spans.append(result.stats["draft_span"])
        self._samples = self._unmeasured(self._samples)
        if not self._potential and not self._samples:
            # the space is measured (an enumerated task's end); picks a prefetch left building still go
            deferred = self._unmeasured(self._deferred)
            self._deferred = deferred[n:]
            return ([s for _, s in deferred[:n]] or None), stats
        verify_start = time.perf_counter()
        self._searches += 1
        gated = self._gate is not None and self._gate.use_draft()
        if self._searches <= self.draft_rounds:  # the draft's order, as a cold verifier's start
            ranked, cold = list(self._potential), True
        elif gated:
            ranked, cold = list(self._potential), False
        elif ranked_ahead is not None:
            ranked, cold = self._unmeasured(ranked_ahead[0]), ranked_ahead[1]
        else:
            ranked, cold = self._verify(evolve=not self._enumerated)
        if self._gate is not None:
            stats.update(gated=int(gated), verifier_acc=self._gate.verifier_acc, draft_acc=self._gate.draft_acc)
        n_random = min(int(n * self.eps_greedy), len(self._samples))
        n_local = min(round(n * self.local_share), n - n_random)
        dropped_before = self._size.dropped if self._size is not None else 0
        picks = self._first(ranked, n - n_random - n_local)
        chosen = {k for k, _ in picks}
        if n_local > 0:  # local moves; what they cannot fill goes to the verifier's next picks
            local = self._first(self._local(n_local, chosen, by_draft=cold or gated), n_local)
            chosen |= {k for k, _ in local}
            more = self._first([pair for pair in ranked if pair[0] not in chosen], n_local - len(local))
            chosen |= {k for k, _ in more}
            picks += local + more
            stats["local"] = len(local)
        # each schedule once (a batch is built ahead by its keys), whatever repeats the samples hold
        extra = _distinct(pair for pair in self._samples if pair[0] not in chosen)
        picks += self._first([extra[i] for i in self.rng.permutation(len(extra))], n - len(picks))
        if self._size is not None:
            stats["size_dropped"] = self._size.dropped - dropped_before
        if self._deferred:  # the last batch's picks left building go first; their builds go on
            deferred, self._deferred = self._unmeasured(self._deferred), []
            first = {k for k, _ in deferred}
            picks = (deferred + [pair for pair in picks if pair[0] not in first])[:n]
        stats.update(
            verify_scored=self.verify_model.scored - verify_before,
            # drafting in this search, and a draft it took up from the background (whose wait was part of it)
            draft_s=verify_start - start - waited + background_s,
            verify_s=time.perf_counter() - verify_start + verify_ahead_s,
            verifier_s=self.verify_model.seconds - verifier_before,
            cold_start=int(cold),
        )
        return [s for _, s in picks], stats

    def _local(self, n: int, exclude: set[int], by_draft: bool) -> Pairs:
        """Up to `n` local moves: unmeasured children, not in `exclude`, of one generation of mutation
        from the task's `local_parents` best measured schedules (4n children, parents drawn by score),
        best first by the verifier, or by the draft model (`by_draft`); none before a measurement."""
        parents = self._best_measured(self.local_parents)
        if not parents:
            return []
        children = max(4 * n, len(parents))
        search = self._evolutionary_search(children, 1, self.draft_model if by_draft else self.ranker)
        try:  # the heap holds the parents too (the search does not know them as measured): filtered below
            evolved = _EVOLVE(search, parents, children + len(parents))
        finally:
            search.post_tuning()
        return [pair for pair in self._unmeasured(_pairs(evolved)) if pair[0] not in exclude][:n]

    def _evolutionary_search(
        self,
        population: int,
        generations: int,
        cost_model: Any,
        min_samples: int = FIRST_DRAFT_MIN_SAMPLES,
        context: Any = None,
    ) -> Any:
        inner = ms.search_strategy.EvolutionarySearch(
            population_size=population,
            init_measured_ratio=0.0,
            init_min_unmeasured=min_samples,
            genetic_num_iters=generations,
            genetic_mutate_prob=self.mutation_prob,
            eps_greedy=0.0,
        )
        inner._initialize_with_tune_context(self.context if context is None else context)
        inner.pre_tuning(_UNLIMITED, max(self.per_round, 1), self.design_spaces, self.database, cost_model)
        return inner

    @property
    def _first_population(self) -> int:
        """The population of a task's first draft."""
        return self.population_size if self.first_draft_population is None else self.first_draft_population

    @property
    def _space_cap(self) -> int:
        """The most the potential space can hold: a first draft of fewer schedules than the potential
        space holds is low only under its own share."""
        return self.potential_size if self._drafts > 1 else min(self.potential_size, self._first_population)

    def _best_measured(self, limit: int) -> list:
        """Up to `limit` best measured schedules of the task, fastest first: this run's own
        measurements (`_notify` keeps them) and the best records an earlier run left in the
        database, as `pre_tuning` replayed them (`_seed_best`). Replaying a record took 5-26 ms on
        the host, and a round asked for up to 51 of them and a draft for 102 (1.3 s of a 7.3 s
        verify of the 3x3 conv, docs/benchmarks.md), so they are not replayed every round."""
        if limit <= 0:
            return []
        if not self._seeded:
            self._seeded = True
            self._seed_best()
        return [sch for _, (_, sch) in self._sorted_best()[:limit]]

    @property
    def _best_kept(self) -> int:
        """The most best-measured schedules a draft or a verify asks for."""
        return max(1, int(self.population_size * max(self.init_measured_ratio, self.pool_measured_ratio)))

    def _sorted_best(self) -> list:
        return sorted(self._best.items(), key=lambda item: (item[1][0], item[0]))

    def _best_to_keep(self) -> int:
        return self._best_kept

    def _seed_best(self) -> None:
        """The best records the database held for this task before this run measured any, which
        `pre_tuning` replayed for the measured set and kept (`best_replayed`, `_best_to_keep`): a
        resumed task replays them once, not again here."""
        for latency, sch in self.best_replayed or ():
            self._best.setdefault(_key(sch), (latency, sch))
        self.best_replayed = []  # held once: `_best` keeps what a round asks for

    def _first_ranking(self) -> Any:
        """What the first draft's thread does after it (`first_verify_ahead`): rank the draft's potential
        space by the verifier, as the first round would; returns (ranking, whether cold), its seconds,
        the verifier's seconds and how many it scored. None when the first round would not ask the
        verifier, or the task has measurements (a resumed task: its best measured schedules, which
        join the verifier's pool, stay with the loop's thread).
        The verifier's inner search is made here, in the caller's thread (making one commits the
        workload to the database)."""
        if not self.first_verify_ahead or self.draft_rounds > 0 or self.quick_start or self.measured:
            return None
        generations = self._verify_generations()
        pool = min(self.verify_pool, self.potential_size, self._first_population)  # what a full first space fills
        verifier = self._evolutionary_search(pool, generations, self.ranker) if generations > 0 else None

        def rank(result: DraftResult) -> tuple | None:
            start, seconds, scored = time.perf_counter(), self.verify_model.seconds, self.verify_model.scored
            potential = self._space_of(result)
            try:
                if result.enumerated:  # the whole space: ranked, nothing to evolve
                    ranking = self._verify(potential, evolve=False)
                elif verifier is not None and len(potential) < pool:
                    return None  # the first round verifies: its smaller search is made in its thread
                else:
                    ranking = self._verify(potential, verifier)
            finally:
                if verifier is not None:
                    verifier.post_tuning()
            return (
                ranking,
                time.perf_counter() - start,
                self.verify_model.seconds - seconds,
                self.verify_model.scored - scored,
            )

        return rank

    def _new_draft(self, then: Any = None) -> Draft:
        """The next draft: the last population (less what was measured) refreshed with fresh samples
        and the best measured schedules, or, the first time, a fresh sample; what it needs of the
        database and of the measured set is read here, in the search's thread (`bridge.drafting`)."""
        population = self.population_size if self._drafts else self._first_population
        parents = self._best_measured(int(population * self.init_measured_ratio))
        reused = [s for k, s in self._unmeasured(self._population)] if self._drafts else []
        fresh = population - len(parents)
        if reused:
            fresh = min(fresh, max(int(self.population_size * self.resample_ratio), fresh - len(reused)))
        return Draft(
            drafter=self.drafter if self._drafts else self.first_drafter,
            sampler=self.resampler if self._drafts else self.first_sampler,
            draft_model=self.draft_model,
            context=self.context if self._drafts else self.first_context,
            parents=parents,
            reused=reused,
            fresh=fresh,
            population_size=population,
            quick_start=self.quick_start and not self._drafts,
            then=then,
            nice=self.draft_nice,
        )

    def _space_of(self, result: DraftResult) -> Pairs:
        """The potential space a draft makes: its best unmeasured evolved schedules (what `_take` keeps
        and what a first verify ahead ranks)."""
        return self._unmeasured(result.evolved)[: self.potential_size]

    def _take(self, result: DraftResult) -> dict:
        """Make a draft the potential space; returns its statistics: `sample_s` (MetaSchedule's
        SampleInitPopulation, which rejects the random schedules that fail a postprocessor, e.g.
        VerifyGPUCode), `samples` (the valid fresh schedules) of `samples_asked` (fewer on GPU
        targets), `psa_s` and `draft_scored`."""
        self._samples = result.samples
        self._population = result.evolved
        self._potential = self._space_of(result)
        self._unevolved = result.unevolved
        self._enumerated = result.enumerated
        self._drafts += 1
        self._last_draft_s = result.stats["draft_s"]
        self.ledger.note(result.stats["draft_s"])
        return {k: v for k, v in result.stats.items() if k not in ("draft_s", "draft_span")}

    def _draft_needed(self, n: int) -> tuple[bool, bool]:
        """(whether this round must draft before it picks `n`, whether the potential space ran under
        `redraft_below` while it still fills the batch, a draft `low_draft_ahead` treats as a stall's;
        without `low_draft_ahead` a space under `redraft_below` must draft too)."""
        left = len(self._potential)
        must = left < n or (self.redraft_every > 0 and self.round % self.redraft_every == 0)
        must = must or not self._drafts
        if self._unevolved:  # a quick start's samples: evolved alongside while they fill the batches
            return (False, True) if self.draft_ahead and not must else (True, False)
        low = left < self.redraft_below * self._space_cap
        if not self.low_draft_ahead:
            return must or low, False
        return must, low and not must

    def _share_allows(self) -> bool:
        """Whether a stall draft now keeps the run's drafting within `redraft_share` of its time."""
        return self.ledger.allows(self._last_draft_s, self.redraft_share)

    def _first(self, pairs: Pairs, n: int) -> Pairs:
        """The first `n` of `pairs`, passing over those `--size-filter-kb` rules out (when set)."""
        return pairs[:n] if self._size is None else self._size.first(pairs, n)

    def _unmeasured(self, pairs: Sequence[tuple[int, Any]]) -> Pairs:
        """`pairs` less what was measured and what is searched ahead for a batch not yet handed out."""
        return [(k, s) for k, s in pairs if k not in self.measured and k not in self._reserved]

    def _verify_generations(self) -> int:
        """The generations of the task's next verify: `first_verify_generations` for its first."""
        first = self.first_verify_generations
        return self.verify_generations if self._verified or first is None else first

    def _verify(self, potential: Pairs | None = None, verifier: Any = None, evolve: bool = True) -> tuple[Pairs, bool]:
        """The potential space (or `potential`) ranked by the verify model, whose generations evolve
        in `verifier` when given (an inner search made for `verify_pool` schedules; its caller ends it),
        unless not `evolve` (an enumerated space: evolution finds nothing new); (ranking, whether it
        was a cold start)."""
        potential = self._potential if potential is None else potential
        generations, self._verified = self._verify_generations(), True
        self.verify_model.forget()  # the verifier may have been updated since the last round
        if not potential:
            return [], False
        scores = self.ranker.predict(self.context, [candidate(s) for _, s in potential])
        if np.ptp(scores) == 0.0:  # a cold verifier (the blend passes it through): PSA's order
            return list(potential), True
        ranked = [potential[i] for i in np.argsort(-scores, kind="stable")]
        if generations == 0 or not evolve:
            return ranked, False
        limit = min(
            int(len(self.measured) * self.pool_measured_ratio), int(self.population_size * self.pool_measured_ratio)
        )
        pool = [s for _, s in ranked[: self.verify_pool]] + self._best_measured(limit)
        own = verifier is None  # a given one was made for this pool's size (`_first_ranking`)
        if own:
            verifier = self._evolutionary_search(len(pool), generations, self.ranker)
        try:
            # The heap holds as many as the pool: the measured parents and repeats are filtered out.
            best = self._unmeasured(_pairs(_EVOLVE(verifier, pool, len(pool))))
        finally:
            if own:
                verifier.post_tuning()
        # The evolved best first, then the rest of the potential space in the verifier's order.
        seen = {k for k, _ in best}
        return best + [pair for pair in ranked if pair[0] not in seen], False
