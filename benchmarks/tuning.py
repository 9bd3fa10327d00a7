"""The tuning suite: Pruner against MetaSchedule's default on GPU work none of our models trained on.

An "arm" is one method tuning one workload with one seed for a fixed search-time budget
(`--budget-s`, the same for every method). Every arm writes its curve (one row per measured batch:
trials, seconds, best latency, where the time went) to `RESULTS/<workload>/<method>-s<seed>.csv`;
an arm whose file exists is done, so the suite resumes across 10-minute device calls (`--time-limit`
stops starting arms that would not finish in the call). `--report` reads every arm and writes the
tables and the plots (latency against time and against trials, one titled panel per workload).

Methods:
- xgb: MetaSchedule's default (evolutionary search, population 512, XGBoost cost model);
- pruner: draft-then-verify, PSA drafts, PAM trained online from nothing verifies (pipelined);
- moa: the same, the verifier being the pretrained PAM adapted online (pam-siamese-update);
- mlp: MetaSchedule's evolutionary search with our TenSet MLP trained online.
Workloads: operator specs (`data.zoo.OPERATORS`) or `net:NAME:K`, the K heaviest tasks of a zoo
network tuned together as one workload (MetaSchedule's gradient task scheduler).
`--eager` also times each operator in torch eager mode (cuBLAS / cuDNN, fp32, TF32 off) on the
same GPU, the vendor-library reference.
`--gpus N` runs N arms at once, one process per GPU, each pinned to its share of the cores (an
H100 pair's 32 cores give each arm the 16 a one-GPU machine has); the pending arms are dealt out in
turn, so each process resumes the same way.

    python benchmarks/tuning.py --arms xgb pruner --budget-s 120 --time-limit 540 --results R --eager
    python benchmarks/tuning.py --arms xgb pruner --budget-s 240 --time-limit 560 --results R --gpus 2
    python benchmarks/tuning.py --report --results R --plot docs/img/tuning_suite.png
    python benchmarks/tuning.py --report --results R --baseline pruner   # MoA against each seed's Pruner arm

`--variants` runs settings of one method side by side in one job, paying the start-up once
(`benchmarks/suite_variants.py`):

    python benchmarks/tuning.py --arms pruner --variants pruner-quick:quick_start=true pruner --budget-s 195 --results R

Over 400 lines because of its command line (about 110 of them): the suite takes tune.py's search and
measurement knobs and the report's flags; the report, the variants, the eager timing and the
sharding over GPUs are modules of their own.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import shutil
import sys
import time
import typing
from pathlib import Path

from jsonargparse import ArgumentParser

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.suite_eager import eager_times
from benchmarks.suite_report import report, slug
from benchmarks.suite_shards import pin, run_shards, share
from benchmarks.suite_variants import parse_variants
from bridge.config import DEFAULT_PSA_FORMULA, PSA_FORMULAS, CostModelConfig, MeasureConfig, SearchConfig
from data.atomic import atomic_write_text

WORKLOADS = (
    "dense:128,3072,768",  # a transformer feed-forward layer, sequence 128
    "batch_matmul:12,128,128,64",  # attention scores: 12 heads, sequence 128, head size 64
    "conv2d:1,35,35,192,64,1,1,0",  # an Inception-v3 1x1 conv
    "conv2d:1,35,35,64,96,3,1,1",  # an Inception-v3 3x3 conv
    "depthwise_conv2d:1,28,28,240,5,1,2",  # a 5x5 depthwise conv (EfficientNet-style)
    "net:vit_b16:1",  # the heaviest fused kernel of ViT-B/16
    "net:resnet_50:4",  # the 4 heaviest tasks of ResNet-50, tuned as a network
)
METHODS = ("xgb", "pruner", "moa", "mlp")
SEARCH_KNOBS = (
    "psa_formula",
    "population",
    "potential",
    "draft_generations",
    "redraft_every",
    "redraft_stall",
    "redraft_backoff",
    "redraft_share",
    "redraft_min_samples",
    "verify_gate",
    "psa_weight",
    "pipeline",
    "fill_device",
    "straggler_grace",
    "draft_ahead",
    "low_draft_ahead",
    "first_drafts_ahead",
    "first_verify_ahead",
    "draft_nice",
    "search_ahead",
    "build_apart",
    "size_filter_kb",
    "eps_greedy",
    "local_share",
    "local_parents",
    "draft_rounds",
    "quick_start",
    "first_draft_generations",
    "first_draft_population",
    "first_draft_min_samples",
    "constrained_sampling",
    "first_verify_generations",
    "first_draft_threads",
)
"""The draft-then-verify settings this CLI passes to `bridge.config.SearchConfig` as they are."""
COST_KNOBS = ("epochs", "background_update", "model_device")
"""The online-training settings this CLI passes to our cost models' `bridge.config.CostModelConfig`."""
MEASURE_KNOBS = ("artifact", "reuse_kernels", "build_nice", "timer")
"""The measurement settings a variant may change (`bridge.config.MeasureConfig`): the job's build
workers export each arm's builds as its `artifact` says (`PooledLocalBuilder.set_artifact`),
compile a kernel compiled before again or not, as each arm's runner measures it again or not
(`reuse_kernels`; `PooledLocalBuilder.set_compile_cache`), and build at the arm's CPU priority
(`build_nice`; `PooledLocalBuilder.set_nice`); each arm's runner times as its `timer` says (the runner
is the arm's own)."""


def tasks_of(workload: str, target):
    from data import zoo

    if workload.startswith("net:"):
        _, name, k = workload.split(":")
        return zoo.select_tasks(zoo.extract_network_tasks(name, target), max_tasks=int(k))
    return [zoo.operator_task(workload)]


def _online(args) -> dict:
    """The cost models' online-training settings (`COST_KNOBS`) of `args`."""
    return {knob: getattr(args, knob) for knob in COST_KNOBS}


def configs(method: str, args):
    if method == "xgb":
        return CostModelConfig(name="xgb", seed=args.seed_value), SearchConfig()
    if method == "mlp":
        return CostModelConfig(name="mlp", seed=args.seed_value, **_online(args)), SearchConfig()
    knobs = {k: getattr(args, k) for k in SEARCH_KNOBS}
    search = SearchConfig(psa=args.psa, **knobs)
    if method == "moa":
        if not args.checkpoint:
            raise ValueError("the moa arm needs --checkpoint (a pretrained PAM artifact)")
        moa = CostModelConfig(
            name="pam-siamese-update",
            checkpoint=args.checkpoint,
            adapt_every=args.adapt_every,
            seed=args.seed_value,
            **_online(args),
        )
        return moa, search
    return CostModelConfig(name="pam", seed=args.seed_value, **_online(args)), search


def measure_config(args) -> MeasureConfig:
    """An arm's measurement settings, as the job's (or its variant's) `args` give them."""
    return MeasureConfig(
        min_repeat_ms=args.min_repeat_ms,
        artifact=args.artifact,
        build_nice=args.build_nice,
        reuse_kernels=args.reuse_kernels,
        timer=args.timer,
        reread_top=getattr(args, "reread_top", None),
    )


def run_arm(
    workload: str,
    method: str,
    seed: int,
    args,
    builder,
    walk_pool=None,
    label: str | None = None,
    settings=None,
    reread_to: Path | None = None,
) -> list[dict]:
    """One arm; `label` names its files (None: the method), `settings` override the job's knobs. With
    `reread_to`, the arm's re-read finals (`bridge.reread`: its best records measured again once its
    search stopped; a GPU's default) are written there as JSON, when it re-read any."""
    args = copy.copy(args)
    for knob, value in (settings or {}).items():
        setattr(args, knob, value)
    args.seed_value = seed
    cost_model, search = configs(method, args)
    work = Path(args.work) / slug(workload) / f"{arm_name(method, label)}-s{seed}"
    shutil.rmtree(work, ignore_errors=True)  # an arm cut off by the call's end starts again
    if reread_to is not None:
        reread_to.unlink(missing_ok=True)  # a cut-off run's, which this one may not replace
    job_artifact = getattr(builder, "artifact", args.artifact)
    job_cache = getattr(builder, "compile_cache", args.reuse_kernels)
    job_nice = getattr(builder, "nice", args.build_nice)
    if args.artifact != job_artifact:  # a variant's artifact, for this arm only
        builder.set_artifact(args.artifact)
    if args.build_nice != job_nice:  # a variant's priority: the arm's builds on workers started at it,
        builder.set_nice(args.build_nice, wait=True)  # before the arm's clock starts
    if args.reuse_kernels and hasattr(builder, "set_compile_cache"):  # the arm's builds: a compile cache of its own
        builder.set_compile_cache(True, fresh=True)
    elif args.reuse_kernels != job_cache:
        builder.set_compile_cache(False)
    try:
        result = _tune_arm(workload, seed, args, builder, walk_pool, cost_model, search, work)
    finally:
        if args.artifact != job_artifact:
            builder.set_artifact(job_artifact)
        if args.build_nice != job_nice:
            builder.set_nice(job_nice, wait=True)
        if args.reuse_kernels != job_cache:  # a reuse arm's folder goes with it
            builder.set_compile_cache(job_cache, fresh=args.reuse_kernels)
    if reread_to is not None and getattr(result, "reread", None):
        from bridge.report import reread_summary

        reread_to.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(reread_to, json.dumps({"reread": reread_summary(result)}, indent=1) + "\n")
    return result.rows


def reread_path(csv: Path) -> Path:
    """Where an arm's re-read finals go: beside its CSV, `<arm>-s<seed>.reread.json`."""
    return csv.with_name(f"{csv.stem}.reread.json")


def _tune_arm(workload: str, seed: int, args, builder, walk_pool, cost_model, search, work: Path):
    from bridge.config import TuneConfig
    from bridge.tuning import tune_tasks

    return tune_tasks(
        tasks_of(workload, args.target),
        args.target,
        TuneConfig(
            out=str(work),
            trials=args.max_trials,
            trials_per_round=args.trials_per_round,
            seed=seed,
            deadline=args.budget_s,
        ),
        search=search,
        cost_model=cost_model,
        measure=measure_config(args),
        builder=builder,
        walk_pool=walk_pool,
        progress=False,
        label=workload,
    )


def arm_name(method: str, label: str | None = None) -> str:
    """What an arm's files are named after: its method, or the `--label` of a variant of it (e.g.
    "pruner-r16" for Pruner with other settings), so that variants share a results folder and the
    report sets each beside XGB."""
    if label is None:
        return method
    if not label or "/" in label or label in METHODS or label.rpartition("-s")[2].isdigit():
        raise ValueError(f"--label {label!r}: a file name that is not a method's and does not end in -s<digits>")
    return label


def arm_path(results: Path, seed: int, workload: str, method: str, label: str | None = None) -> Path:
    """The results file of one arm (its existence marks the arm done)."""
    return results / slug(workload) / f"{arm_name(method, label)}-s{seed}.csv"


def pending_arms(results: Path, seeds, workloads, methods, label: str | None = None, variants=None) -> list[tuple]:
    """(seed, workload, method, label, settings) of every arm with no results file yet, in the suite's
    order; with `variants` ((label, settings) pairs of `suite_variants.parse_variants`), each of the one
    method's variants in their order, else each method with `label`."""
    kinds = [(methods[0], lb, st) for lb, st in variants] if variants else [(m, label, {}) for m in methods]
    return [
        (s, w, m, lb, st)
        for s in seeds
        for w in workloads
        for m, lb, st in kinds
        if not arm_path(results, s, w, m, lb).exists()
    ]


def write_rows(path: Path, rows: list[dict]) -> None:
    from bridge.search_log import SearchLog

    lines = [",".join(SearchLog.FIELDS)]
    for r in rows:
        lines.append(",".join(str(r.get(k, "")) for k in SearchLog.FIELDS))
    atomic_write_text(path, "\n".join(lines) + "\n")


def _field(config: type, name: str) -> dataclasses.Field:
    """A config dataclass's field, whose default and help this CLI's flag of the same name takes."""
    (field,) = (f for f in dataclasses.fields(config) if f.name == name)
    return field


def main(argv: list[str] | None = None) -> None:
    p = ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--results", default="benchmarks/results/tuning", help="one CSV per finished arm")
    p.add_argument("--report", action="store_true", help="only read the results: tables and plots")
    p.add_argument("--plot", default=None, help="with --report: where the figure goes")
    p.add_argument(
        "--also",
        nargs="+",
        default=[],
        help="with --report: more results folders read beside --results (a workload's seeds may come from several; an arm in two is refused)",
    )
    p.add_argument(
        "--xgb-from",
        nargs="+",
        default=[],
        help="with --report: folders whose xgb arms (the --baseline's) only are read, for the workloads and seeds "
        "of the others that lack one (an A/B run without XGB, against XGB runs of another call)",
    )
    p.add_argument(
        "--take",
        nargs="+",
        default=[],
        help="with --report: FOLDER:LABEL[=METHOD], one label's arms from a folder, reported as METHOD (e.g. an "
        "A/B's variant under the method whose default it became, beside later seeds of that method)",
    )
    p.add_argument(
        "--baseline",
        default="xgb",
        help="with --report: the method (or label) every other is measured against: equal-time latency and "
        "the time to its final (e.g. pruner, for MoA/Pruner pairs run without XGB)",
    )
    p.add_argument(
        "--against",
        nargs="+",
        default=["pruner"],
        help="with --report: methods (or labels) every other method is paired with, seed by seed",
    )
    p.add_argument(
        "--sooner",
        type=float,
        default=0.0,
        help="with --report: a what-if, every non-XGB curve moved this many seconds earlier (a first batch that "
        "much sooner)",
    )
    p.add_argument(
        "--reread",
        nargs="+",
        default=[],
        help="with --report: benchmarks/launch_floor.py JSON files that re-read every arm's best kernel; each "
        "arm's curve is rescaled by its best kernel's re-read over its reported latency (one scale for all)",
    )
    p.add_argument("--workloads", nargs="+", default=list(WORKLOADS))
    p.add_argument("--arms", nargs="+", default=["xgb", "pruner", "moa"], choices=METHODS, help="methods to run")
    p.add_argument(
        "--label",
        default=None,
        help="name the arms' files and work dirs after this instead of the method (one --arms only): "
        "a variant's settings beside the method's defaults in one results folder, e.g. pruner-r16",
    )
    p.add_argument(
        "--variants",
        nargs="+",
        default=None,
        help="variants of the one method in --arms, run in turn in this job: LABEL[:KNOB=VALUE,...] with "
        "draft-then-verify knobs (e.g. pruner-quick:quick_start=true); the method's own name is its default arm",
    )
    p.add_argument("--seeds", nargs="+", type=int, default=[0])
    p.add_argument("--budget-s", type=float, default=120.0, help="search-time budget of every arm")
    p.add_argument("--time-limit", type=float, default=540.0, help="start no arm that would end after this")
    p.add_argument("--target", default="nvidia/nvidia-h100")
    p.add_argument("--psa", default="auto", help="PSA device row ('auto': this GPU)")
    p.add_argument("--checkpoint", default=None, help="pretrained PAM artifact for the moa arm")
    adapt = _field(CostModelConfig, "adapt_every")  # as tune.py has it
    p.add_argument("--adapt-every", type=int, default=adapt.default, help=f"{adapt.metadata['help']}; the moa arm")
    epochs = _field(CostModelConfig, "epochs")
    p.add_argument("--epochs", type=int, default=epochs.default, help=f"{epochs.metadata['help']}; pruner, moa, mlp")
    background = _field(CostModelConfig, "background_update")
    p.add_argument("--background-update", type=bool, default=background.default, help=background.metadata["help"])
    model_device = _field(CostModelConfig, "model_device")
    p.add_argument("--model-device", default=None, help=f"{model_device.metadata['help']}; pruner, moa, mlp")
    p.add_argument("--psa-formula", default=DEFAULT_PSA_FORMULA, choices=PSA_FORMULAS, help="PSA formula of the draft")
    p.add_argument("--population", type=int, default=None, help="draft population (unset: the default)")
    p.add_argument("--potential", type=int, default=512, help="potential-space size of the draft")
    hints = typing.get_type_hints(SearchConfig)
    for knob in dataclasses.fields(SearchConfig):  # the draft knobs this CLI takes as SearchConfig has them
        if knob.name in SEARCH_KNOBS and knob.name not in ("psa_formula", "population", "potential"):
            flag = "--" + knob.name.replace("_", "-")
            p.add_argument(flag, type=hints[knob.name], default=knob.default, help=knob.metadata["help"])
    p.add_argument("--trials-per-round", type=int, default=16)
    p.add_argument("--max-trials", type=int, default=2000, help="trial cap of an arm (the budget is time)")
    p.add_argument("--min-repeat-ms", type=int, default=10)
    p.add_argument(
        "--build-timeout",
        type=float,
        default=30.0,
        help="seconds a candidate may take to build (then it is a failed build)",
    )
    for name, note in (
        ("max_source_kb", ""),
        ("reread_top", ", its re-read finals in <arm>-s<seed>.reread.json beside its CSV"),
    ):  # MeasureConfig's fields, as typed there
        field = _field(MeasureConfig, name)
        p.add_argument(
            f"--{name.replace('_', '-')}",
            type=typing.get_type_hints(MeasureConfig)[name],
            default=field.default,
            help=f"{field.metadata['help']}; every arm{note}",
        )
    for name in ("artifact", "timer"):  # MeasureConfig's choices
        field = _field(MeasureConfig, name)
        p.add_argument(
            f"--{name}",
            choices=typing.get_args(typing.get_type_hints(MeasureConfig)[name]),
            default=field.default,
            help=f"{field.metadata['help']}; every arm",
        )
    build_nice = _field(MeasureConfig, "build_nice")
    p.add_argument(
        "--build-nice", type=int, default=build_nice.default, help=f"{build_nice.metadata['help']}; every arm"
    )
    reuse = _field(MeasureConfig, "reuse_kernels")
    p.add_argument("--reuse-kernels", type=bool, default=reuse.default, help=f"{reuse.metadata['help']}; every arm")
    p.add_argument("--eager", action="store_true", help="also time the operators in torch eager mode")
    p.add_argument("--work", default="runs/suite", help="tuning work dirs")
    p.add_argument("--gpus", type=int, default=1, help="arms at once, one process per GPU, each on 1/N of the cores")
    p.add_argument("--shard", default=None, help="internal: I/N, run the I-th share of the pending arms")
    argv = sys.argv[1:] if argv is None else list(argv)
    args = p.parse_args(argv)
    results = Path(args.results)
    if args.label is not None and not args.report:
        if len(args.arms) != 1:
            raise ValueError(f"--label {args.label!r} names one method's arms; --arms gave {args.arms}")
        arm_name(args.arms[0], args.label)  # a bad label fails before any arm runs
    variants = None
    if args.variants is not None and not args.report:
        if len(args.arms) != 1 or args.label is not None:
            raise ValueError(f"--variants {args.variants} are of one method, without --label; --arms gave {args.arms}")
        hints = {
            **typing.get_type_hints(SearchConfig),
            **typing.get_type_hints(CostModelConfig),
            **typing.get_type_hints(MeasureConfig),
        }
        variants = parse_variants(args.arms[0], args.variants, SEARCH_KNOBS + COST_KNOBS + MEASURE_KNOBS, hints)
        for label, settings in variants:
            arm_name(args.arms[0], label)  # a bad label fails before any arm runs
            takes = {"xgb": (), "mlp": COST_KNOBS}.get(args.arms[0], SEARCH_KNOBS + COST_KNOBS) + MEASURE_KNOBS
            if set(settings) - set(takes):
                raise ValueError(
                    f"--variants: {label!r} sets {sorted(set(settings) - set(takes))}, which {args.arms[0]} does not take"
                )
            variant = copy.copy(args)  # its configs as `run_arm` makes them, checked before any start-up
            for knob, value in {**settings, "seed_value": args.seeds[0]}.items():
                setattr(variant, knob, value)
            try:
                configs(args.arms[0], variant)
                measure_config(variant)
            except ValueError as err:
                raise ValueError(f"--variants: {label!r}: {err}") from None
    if args.against != p.get_default("against") and not args.report:
        raise ValueError(f"--against {args.against}: methods to pair with in the report; it needs --report")
    if args.xgb_from and not args.report:
        raise ValueError(f"--xgb-from {args.xgb_from}: folders of XGB arms to report against; it needs --report")
    if args.sooner and not args.report:
        raise ValueError(f"--sooner {args.sooner}: a what-if of the report; it needs --report")
    CostModelConfig(model_device=args.model_device)  # a bad --model-device fails here, not in the first arm
    if args.reread and not args.report:
        raise ValueError(f"--reread {args.reread}: re-reads to rescale the report by; it needs --report")
    if args.take and not args.report:
        raise ValueError(f"--take {args.take}: arms to report on; it needs --report")
    if args.baseline != p.get_default("baseline") and not args.report:
        raise ValueError(f"--baseline {args.baseline}: the method to report against; it needs --report")
    if args.also and not args.report:
        raise ValueError(f"--also {args.also}: more folders to report on; it needs --report")
    if args.report:
        print(
            report(
                results,
                plot=args.plot,
                baseline=args.baseline,
                also=tuple(args.also),
                against=tuple(args.against),
                baseline_from=tuple(args.xgb_from),
                sooner=args.sooner,
                take=tuple(args.take),
                reread=tuple(args.reread),
            )
        )
        return
    start = time.perf_counter()
    if args.shard:
        index, count = (int(x) for x in args.shard.split("/"))
        pin(index, count)
    arms = pending_arms(results, args.seeds, args.workloads, args.arms, args.label, variants)
    if args.shard:
        # every share is computed before any child writes a file, from the same listing
        arms = share(arms, index, count)
        print(f"shard {index}/{count}: {len(arms)} arms on cores {sorted(os.sched_getaffinity(0))}", flush=True)
    if not arms:
        print("every arm has its results file")
        return
    if args.eager and not args.shard:
        eager_times(args.workloads, results)  # before the shards start, on the first GPU
    eager_s = time.perf_counter() - start
    if args.gpus > 1 and not args.shard:
        sys.exit(
            run_shards(
                args,
                [a for a in argv if a != "--eager"],
                args.time_limit - (time.perf_counter() - start),
                str(Path(__file__).resolve()),
            )
        )
    import tvm_env

    target = tvm_env.parse_target(args.target)
    tvm_env.setup(target)
    args.target = target
    from bridge.workers import start_workers

    # the first arm of a call would otherwise pay the build and walk workers' start-up in its budget
    # (for CUDA each build worker also builds a tiny kernel: NVRTC is loaded before the first arm)
    tvm_s = time.perf_counter() - start - eager_s
    builder, walk_pool = start_workers(
        target,
        MeasureConfig(
            timeout=args.build_timeout,
            max_source_kb=args.max_source_kb,
            artifact=args.artifact,
            build_nice=args.build_nice,
            reuse_kernels=args.reuse_kernels,
        ),
        walk=True,
        wait=True,
    )
    workers_s = time.perf_counter() - start - eager_s - tvm_s
    print(
        f"start-up {eager_s + tvm_s + workers_s:.1f} s: eager {eager_s:.1f}, TVM {tvm_s:.1f}, workers {workers_s:.1f}",
        flush=True,
    )
    for seed, workload, method, label, settings in arms:
        path = arm_path(results, seed, workload, method, label)
        left = args.time_limit - (time.perf_counter() - start)
        if left < args.budget_s * 1.1 + 15:
            print(f"stopping: {left:.0f} s left in this call, an arm needs about {args.budget_s * 1.1 + 15:.0f}")
            return
        t0 = time.perf_counter()
        rows = run_arm(workload, method, seed, args, builder, walk_pool, label, settings, reread_to=reread_path(path))
        path.parent.mkdir(parents=True, exist_ok=True)
        write_rows(path, rows)
        best = min((r["best_us"] for r in rows), default=math.inf) if rows else math.inf
        print(
            f"arm {workload} {arm_name(method, label)} seed {seed}: {rows[-1]['total_trials'] if rows else 0:.0f} trials, "
            f"best {best:.2f} us, {time.perf_counter() - t0:.0f} s",
            flush=True,
        )


if __name__ == "__main__":
    main()
