"""Typed knob sets of a tuning run: the search, the cost model, the measurement and the run itself.

Each knob is spelled once, here, with its default and its help text (`field(metadata={"help": ...})`).
tune.py builds its command line from these fields (`bridge.cli.add_dataclass_arguments`), and the
Python API takes the same objects:

    tune_tasks(tasks, target, TuneConfig(out="runs/mm", trials=64),
               search=SearchConfig(psa="a100"), cost_model=CostModelConfig(name="xgb"))

Validation that needs no TVM (ranges, required pairs) happens in `__post_init__` and raises
ValueError naming the argument and its value.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Literal

from pruner_models.blend import check_weight

__all__ = [
    "DEFAULT_MAX_SOURCE_KB",
    "DEFAULT_PSA_FORMULA",
    "CostModelConfig",
    "MeasureConfig",
    "SearchConfig",
    "TuneConfig",
]

DEFAULT_MAX_SOURCE_KB = 512.0
"""The tuning builder's compile-size guard: a CUDA kernel with more source fails at once instead of
compiling. On the H100 suite no workload's 10 fastest schedules needed more than 199 KB and 0-5% of
what an arm measured was over 512 KB, but those few took 5-20 s each to compile, and a batch waits
for its slowest build (20 s rounds of 16 in a dense-layer arm without it; docs/benchmarks.md, "One
thread a build worker"). The H100 dataset was collected with the same limit. None (`null`): no limit."""

PSA_FORMULAS = ("published", "occupancy", "traffic", "traffic-occupancy", "traffic-warps", "traffic-stages")
"""The PSA scoring formulas (`bridge.psa.FORMULAS`, where each is defined); named here, in the
import-light module, so that a configuration with another name fails before TVM loads."""

DEFAULT_PSA_FORMULA = "traffic-occupancy"
"""The PSA formula that drafts unless told otherwise (`bridge.psa.DEFAULT_FORMULA`, where the
measurements behind the choice are); defined here, in the import-light module, so the CLI's
defaults and `pruner_lightning.draft_verify` name it without loading TVM."""


def _knob(default, help: str, **metadata):  # noqa: A002 - "help" is the CLI's word
    return dataclasses.field(default=default, metadata={"help": help, **metadata})


@dataclasses.dataclass
class SearchConfig:
    """The search strategy: Pruner's draft-then-verify (`psa` set) or MetaSchedule's evolution."""

    psa: str | None = _knob(
        None, "draft-then-verify with this PSA device row (configs/devices.yaml; 'auto': this GPU); unset: evolution"
    )
    psa_devices: str | None = _knob(None, "YAML file with more PSA device rows")
    psa_formula: str = _knob(
        DEFAULT_PSA_FORMULA, "PSA scoring formula (bridge.psa.FORMULAS; 'published' is the paper's)"
    )
    population: int | None = _knob(
        None, "population size (unset: 512, for the draft (published: 1536) and for MetaSchedule's evolution)"
    )
    potential: int = _knob(256, "potential-space size the draft keeps (published: 512 of 1536)")
    draft_generations: int = _knob(2, "evolution generations scored by PSA (published: 2)")
    first_draft_generations: int | None = _knob(
        None,
        "a task's first draft's generations, the most of its first batch's time (unset: --draft-generations; 1 on "
        "one H200: worse first batches, XGB's final reached later on single operators and on ResNet-50, 2.34x "
        "against 3.66x)",
    )
    first_draft_population: int | None = _knob(
        None,
        "a task's first draft's population: the fresh samples a sampling pass asks for and the children of each "
        "generation (unset: --population; 256 with --first-draft-min-samples 25 on one H200, ResNet-18 whole in "
        "300 s: half the first drafts' seconds, every task's first round done at 178 s against 248, 651 trials "
        "against 435, but worse first batches and a 1.059x slower compiled network (one seed each), 0.726 ms against 0.685)",
    )
    first_draft_min_samples: int = _knob(
        50,
        "valid fresh samples a task's first draft keeps sampling for (MetaSchedule's init_min_unmeasured: 50; a "
        "pass asks for the first draft's population, of which 10-15% of a CUDA convolution's are valid)",
    )
    constrained_sampling: bool = _knob(
        True,
        "on a GPU target a task's first draft samples as MetaSchedule's SampleInitPopulation does but replays only the "
        "draws whose threads and shared memory fit (bridge.sampling; ViT-B/16's patch embedding: 49 ms of the 2-core "
        "host a valid schedule against 855 ms; on one H200 its first rounds were done at 94 s against 144); false: "
        "MetaSchedule's SampleInitPopulation",
    )
    verify_generations: int = _knob(1, "further generations scored by the cost model (published: 1)")
    first_verify_generations: int | None = _knob(
        None,
        "a task's first verify's generations (unset: --verify-generations; 0: a pretrained verifier only ranks the "
        "first draft's potential space: MoA's first verifies of ResNet-50's tasks took 4.5-8.1 s against 8.6-31.2 s "
        "on the host, the first batches 25 s sooner; on two H200s 3.5 s sooner, ending 1.028x higher on two seeds, so unset)",
    )
    verify_pool: int = _knob(128, "the cost model's best this-many of the potential space parent its generations")
    redraft_every: int = _knob(
        0, "0: draft when the potential space runs low; k: also every k-th round of a task (published: 2)"
    )
    redraft_stall: int = _knob(
        3, "k: also draft when a task's best has not improved in its last k measured rounds (0: never)"
    )
    redraft_backoff: bool = _knob(
        False, "double the wait for the next stall re-draft after each one that found nothing better"
    )
    redraft_share: float | None = _knob(
        0.15,
        "s: a draft due on a stall waits while it would take the run's drafting over this share of the run's time "
        "(0.15: on the GPU suite drafting fell to 8-21% of a run from 20-40% and the device idled 4-11 points less "
        "where stall drafts were due, latency level: 1.005x over 8 paired seeds); null: no limit",
    )
    resample_ratio: float = _knob(0.25, "share of a re-draft's population sampled afresh (the rest evolves on)")
    redraft_min_samples: int = _knob(
        8,
        "a re-draft samples afresh until this many are valid (the first draft: 50, MetaSchedule's "
        "init_min_unmeasured); about one pass where most random GPU schedules fail to postprocess",
    )
    eps_greedy: float = _knob(0.1, "share of each batch measured at random from the draft's samples")
    local_share: float = _knob(
        0.25,
        "share of each batch given to local moves: one-mutation neighbours of the task's best measured schedules, "
        "best first by the verifier (0.25 on one H200, 210 s, seed 0: 0.87x and 0.97x Pruner's latency on the 3x3 "
        "and depthwise convs in one job, XGB's final 2.02x sooner over five operators against Pruner's 1.41x; "
        "host CPU: 0.655x Pruner's latency over 3 seeds; 0: none)",
    )
    local_parents: int = _knob(8, "how many of the task's best measured schedules parent the local moves")
    quick_start: bool = _knob(
        False,
        "a task's first batches: PSA's order of the first draft's fresh samples, unevolved, while a draft evolves "
        "them (alongside with --draft-ahead); host: first batch 7-22 s sooner; one H200: worse first batches, XGB's "
        "final reached later on single operators and on ResNet-50, 1.90x against 3.66x, so off",
    )
    draft_rounds: int = _knob(
        0,
        "a task's first k batches are the draft's picks (PSA's order of the potential space), the verifier not asked, "
        "as with a cold verifier; for a pretrained one (MoA), whose first verifies cost seconds (0: off)",
    )
    verify_gate: bool | None = _knob(
        None,
        "rank by the draft model while it orders the run's measured batches better than the verifier "
        "(unset: on for a pretrained verifier that never adapts, the *-no-update modes, and for "
        "pam-siamese-update when it adapts less often than every round)",
    )
    psa_weight: float = _knob(
        0.0,
        "blend the verifier's scores with PSA's within a round, z(verifier) + w z(log PSA) (pruner_models.blend; "
        "0: the verifier alone; 1 raised held-out peak@1 offline, not yet measured in tuning)",
    )
    pipeline: bool = _knob(True, "search and build the next batch while the current one builds and runs")
    fill_device: int = _knob(
        64,
        "k: grow a task's batches, up to k trials, until running one lasts as long as the search and build of "
        "the next (pipelined draft-then-verify; 0: every batch is --trials-per-round)",
    )
    draft_ahead: bool = _knob(
        True,
        "a re-draft due on a stall runs alongside the rounds (its own thread) instead of before the round's "
        "verify; a later round takes it up (draft-then-verify)",
    )
    low_draft_ahead: bool = _knob(
        True,
        "a draft due because the potential space ran under half its size while it still fills a batch is "
        "drafted for as a stall is: held under --redraft-share, alongside with --draft-ahead; a draft alongside "
        "is taken up once done (or when the space cannot fill a batch) instead of by the next round (on the GPU "
        "suite drafting fell to 6-10% of every arm from 8-24%, latency level: 0.987x over 10 paired seeds); "
        "false: in turn, never held (the default before 2026-11-28)",
    )
    first_drafts_ahead: int = _knob(
        4,
        "k: with a pipeline, up to k tasks of a run draft their first potential space at once from the run's start, "
        "each on a thread of its own, instead of each when its first round comes (a network's tasks; 0: off; 4 with "
        "4 threads each against 2 with 16, ResNet-18 whole on one H200 in 300 s, one seed: every task's first round "
        "done at 218 s against 221-248, compiled 0.675 ms against 0.685-0.713; 2 before 2026-12-01)",
    )
    first_draft_threads: int | None = _knob(
        None,
        "T: threads each first draft samples, evolves and featurizes on (unset: the host's cores shared among the "
        "first drafts at once, min(--first-drafts-ahead, tasks), bridge.factory.resolve_first_draft_threads; one H200 "
        "machine, a ResNet conv's first draft: alone 20.9 s on 16 threads, 22.6 s on 8; 2 at once on 16 threads each "
        "3.4-3.5 drafts a minute, on 8 3.6; 4 at once on 4 threads 4.5-5.0)",
    )
    first_verify_ahead: bool = _knob(
        True,
        "with --first-drafts-ahead, the first draft's thread also ranks its potential space by the verifier, as the "
        "task's first round would, so a network's first verifies run beside the other tasks' drafts (a pretrained "
        "verifier took 4-15 s a task on ResNet-50's four in the tuning loop); false: in the first round",
    )
    draft_nice: int = _knob(
        0,
        "n in 1-19: drafts alongside the rounds run n steps of nice lower in CPU priority than the builds and the "
        "next batch's search, which the device waits on (Linux; 0: the same priority; n = 10 on one H200, ResNet-50: "
        "level, the rounds waited longer on drafts)",
    )
    search_ahead: int = _knob(
        2,
        "with a pipeline, how many rounds ahead of the batch on the device the search works: 2, the batch after the "
        "next is searched while the next one builds, so a round lasts the longer of search and build, not their sum "
        "(one more round of staleness; on the GPU suite the device idled less on 6 of 7 seeds, latency level); 1, "
        "the next batch is searched, then built, while the current one runs (the default before 2026-11-27)",
    )
    build_apart: bool = _knob(
        False,
        "with a pipeline, a job's wait for its builds runs on a thread of its own, so the next search (another "
        "task's, in a network) runs meanwhile, and a task's turn waits only for its own jobs (on two H200s, ResNet-50's "
        "four tasks: the loop waited a median 3.6 s a round against 2.7 s, the GPU idled 44% against 38%)",
    )
    size_filter_kb: float | None = _knob(
        None,
        "pass over verified picks whose CUDA source is estimated (bridge.build_size) over this many KB before they "
        "take batch slots, so the next in rank order builds instead; set it to --max-source-kb, whose refusals it "
        "forestalls (84% of them on the H200 suite's schedules at 256 KB); null: off (untested on the GPU)",
    )
    straggler_grace: float | None = _knob(
        0.5,
        "g: a batch built ahead waits, once 90% of it is built in t s, at most g x t s more; picks still building "
        "then go to the next batch, their builds going on (pipelined draft-then-verify; null: wait for every build)",
    )

    def __post_init__(self) -> None:
        if self.psa_formula not in PSA_FORMULAS:
            raise ValueError(f"--psa-formula {self.psa_formula!r} must be one of {PSA_FORMULAS}")
        if self.population is not None and self.population < 1:
            raise ValueError(f"--population {self.population!r} must be >= 1")
        check_weight(self.psa_weight, f"--psa-weight {self.psa_weight!r}")
        if self.redraft_share is not None and not 0.0 < self.redraft_share <= 1.0:
            raise ValueError(f"--redraft-share {self.redraft_share!r} must be in (0, 1] (null: no limit)")
        if self.first_draft_population is not None and self.first_draft_population < 1:
            raise ValueError(f"--first-draft-population {self.first_draft_population!r} must be >= 1")
        if self.first_draft_min_samples < 1:
            raise ValueError(f"--first-draft-min-samples {self.first_draft_min_samples!r} must be >= 1")
        if self.redraft_min_samples < 1:
            raise ValueError(f"--redraft-min-samples {self.redraft_min_samples!r} must be >= 1")
        if self.search_ahead not in (1, 2):
            raise ValueError(f"--search-ahead {self.search_ahead!r} must be 1 or 2")
        if self.size_filter_kb is not None and not self.size_filter_kb > 0:
            raise ValueError(f"--size-filter-kb {self.size_filter_kb!r} must be > 0 (null: off)")
        if self.first_draft_threads is not None and self.first_draft_threads < 1:
            raise ValueError(
                f"--first-draft-threads {self.first_draft_threads!r} must be >= 1 (unset: the cores over the first drafts at once)"
            )
        if self.first_drafts_ahead < 0:
            raise ValueError(f"--first-drafts-ahead {self.first_drafts_ahead!r} must be >= 0 (0: off)")
        if not 0 <= self.draft_nice <= 19:
            raise ValueError(f"--draft-nice {self.draft_nice!r} must be in 0-19 (0: off)")
        if self.fill_device < 0:
            raise ValueError(f"--fill-device {self.fill_device!r} must be >= 0 (0: off)")
        if self.straggler_grace is not None and not self.straggler_grace >= 0:
            raise ValueError(f"--straggler-grace {self.straggler_grace!r} must be >= 0 (null: wait for every build)")


@dataclasses.dataclass
class CostModelConfig:
    """The cost model that ranks candidates (bridge.factory.COST_MODELS)."""

    name: str = _knob(
        "pam", "cost model: our modes (registry-derived), MetaSchedule's 'xgb' or 'random'", flag="cost-model"
    )
    checkpoint: str | None = _knob(None, "artifact (bridge.export) or train.py .ckpt for the pretrained modes")
    epochs: int = _knob(50, "online-training epochs of our cost models")
    background_update: bool = _knob(
        True,
        "our cost models train on a measured batch on a thread of their own while the next batch is "
        "searched, built and run; the next scoring waits for it, so the picks are the same (false: the "
        "update trains before the next batch is handed out)",
    )
    adapt_every: int = _knob(
        1,
        "pam-siamese-update: adapt the pretrained model after every this-many rounds (published: 4; every round "
        "reached XGB's final 1.19x sooner on the GPU suite, docs/benchmarks.md)",
    )
    model_device: str | None = _knob(
        None,
        "torch device our cost models score and train on: cpu, cuda or cuda:N (unset: cuda when available, "
        "else cpu; on a GPU target the model then shares the GPU with the runner's measurements)",
    )
    seed: int = _knob(0, "seed of the cost model (the CLI's --seed sets it)", cli=False)

    def __post_init__(self) -> None:
        if self.model_device is not None and not re.fullmatch(r"cpu|cuda(:\d+)?", self.model_device):
            raise ValueError(f"--model-device {self.model_device!r}: give cpu, cuda or cuda:N")
        if self.epochs < 1:
            raise ValueError(f"--epochs {self.epochs!r} must be >= 1")
        if self.adapt_every < 1:
            raise ValueError(f"--adapt-every {self.adapt_every!r} must be >= 1")


@dataclasses.dataclass
class MeasureConfig:
    """How candidates are built and measured."""

    runner: Literal["local", "rpc"] = _knob("local", "measure here, or on an RPC device through --tracker")
    tracker: str | None = _knob(None, "RPC tracker HOST:PORT (with --runner rpc)")
    key: str | None = _knob(None, "RPC device key (with --runner rpc)")
    number: int = _knob(3, "runs per measurement")
    repeat: int = _knob(1, "measurements per candidate")
    min_repeat_ms: int = _knob(100, "minimum milliseconds of one measurement")
    timeout: float = _knob(30.0, "build / run timeout (s)")
    workers: int | None = _knob(None, "parallel builds (unset: the target's cores)", aliases=("--builder-workers",))
    max_source_kb: float | None = _knob(
        DEFAULT_MAX_SOURCE_KB,
        "CUDA kernels with more source than this (KB) fail at once instead of compiling (null: no limit)",
    )
    artifact: Literal["tar", "so"] = _knob(
        "tar",
        "the build's artifact: 'tar', MetaSchedule's (the runner links it before loading, a candidate at a time); "
        "'so', linked in the parallel build workers (--runner local only; on an H200 the runner took 18-54 ms "
        "less a trial and measured more trials, at no lower latency)",
    )
    build_nice: int = _knob(
        0,
        "0-19: the build workers run this many steps of nice lower in CPU priority, so the runner's launches "
        "and timings on a busy host do not queue behind compilers (0: off; on two H200s, 10 gave 13-16% fewer "
        "trials at the same latency)",
    )
    timer: Literal["evaluator", "graph"] = _knob(
        "evaluator",
        "how a CUDA candidate is timed: 'evaluator', TVM's (launches from the host, one after another: a kernel "
        "shorter than a launch reads the host's launch rate, 3.8 us on an idle H200 machine, 9.1 us on a busy one); "
        "'graph', its launches captured as a CUDA graph and replayed, the kernel's own time (tvm_env.graph_timer; "
        "--runner local only; off by default: while our cost model works on the same GPU in bursts, a run's "
        "readings of one kernel fall in two groups about 0.18 us a launch apart, the lower from those bursts, "
        "docs/benchmarks.md; --reread-top reads the finals again with the device quiet)",
    )
    reread_top: int | None = _knob(
        None,
        "after the search, measure each task's best N records again, 3 rounds each with the device quiet; the "
        "report gives both finals and a network compiles with the re-read best (bridge.reread; unset: 3 on a GPU, "
        "0 on a CPU; 0: off)",
    )
    reuse_kernels: bool = _knob(
        False,
        "measure each distinct kernel once: a candidate whose generated code was measured already in this run "
        "takes that measurement instead of the device's time, and a CUDA kernel compiled already is not compiled "
        "again (schedules that differ only where the code does not)",
    )

    def __post_init__(self) -> None:
        if self.runner == "rpc" and (not self.tracker or not self.key or ":" not in self.tracker):
            raise ValueError(
                f"--runner rpc needs --tracker HOST:PORT and --key KEY (got tracker={self.tracker!r}, key={self.key!r})"
            )
        for name in ("number", "repeat"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name} {getattr(self, name)!r} must be >= 1")
        if self.timeout <= 0:
            raise ValueError(f"--timeout {self.timeout!r} must be > 0")
        if self.max_source_kb is not None and self.max_source_kb <= 0:
            raise ValueError(f"--max-source-kb {self.max_source_kb!r} must be > 0 (null: no limit)")
        if self.artifact not in ("tar", "so"):
            raise ValueError(f"--artifact {self.artifact!r} must be 'tar' or 'so'")
        if not 0 <= self.build_nice <= 19:
            raise ValueError(f"--build-nice {self.build_nice!r} must be in 0-19 (0: off)")
        if self.artifact == "so" and self.runner != "local":
            raise ValueError("--artifact so needs --runner local: an RPC device links the .tar with its own compiler")
        if self.reread_top is not None and self.reread_top < 0:
            raise ValueError(f"--reread-top {self.reread_top!r} must be >= 0 (0: off)")
        if self.timer not in ("evaluator", "graph"):
            raise ValueError(f"--timer {self.timer!r} must be 'evaluator' or 'graph'")
        if self.timer == "graph" and self.runner != "local":
            raise ValueError(
                "--timer graph needs --runner local: it drives the CUDA driver of the runner's own process"
            )


@dataclasses.dataclass
class TuneConfig:
    """The run: budget, seed, deadline and where everything goes."""

    out: str = dataclasses.field(
        metadata={
            "help": "output dir: database, curve, cost-model state, summary.json, logs",
            "aliases": ("--work-dir",),
        }
    )
    trials: int = _knob(200, "total trial budget of the output dir (earlier runs included)")
    trials_per_round: int = _knob(10, "measurements per batch (published: 10)")
    max_trials_per_task: int | None = _knob(None, "per-task cap (unset: only --trials)")
    seed: int = _knob(0, "seeds the task contexts, the task scheduler and the cost model")
    deadline: float | None = _knob(None, "stop starting new batches after this many seconds of this run")

    def __post_init__(self) -> None:
        if not str(self.out):
            raise ValueError(f"--out {self.out!r} must name an output dir")
        if self.trials < 1 or self.trials_per_round < 1:
            raise ValueError(
                f"--trials ({self.trials!r}) and --trials-per-round ({self.trials_per_round!r}) must be >= 1"
            )
        if self.max_trials_per_task is not None and self.max_trials_per_task < 1:
            raise ValueError(f"--max-trials-per-task {self.max_trials_per_task!r} must be >= 1")
