"""Measure tuning runs' best schedules again, side by side on one idle device: what each run's reported
best latency is worth once the noise of its own measurements is out.

A run reports the best of its measurements. A run that measured one kernel several times (schedules
that compile to the same code, `benchmarks/kernel_repeats.py`) reports the lowest of several noisy
readings of it; a run with `--reuse-kernels` reports one reading a kernel. This takes each database's
`--top` best kernels of each workload (a task of a network; a kernel by its best record, its twins
left out), builds them, and measures every one of them `--rounds` times on this machine's device,
with the databases' candidates interleaved in each round (a round's order is the last one's,
rotated) so that drift in the device falls on all alike. A candidate's figure is its median over the
rounds; a workload's is its best candidate's. The table sets each workload's reported best (the
database's) beside that re-measured best. With `--timer graph` each kernel is timed as a CUDA graph
(`tvm_env.graph_timer`): its own time on the GPU, without the host's launches, which set the reading of
a kernel of a few microseconds (docs/benchmarks.md, "The host's launch floor").

    python benchmarks/remeasure.py --databases "[runs/a/dense/pruner-s0,runs/a/dense/pruner-reuse-s0]" \\
        --target nvidia/nvidia-h100 --top 5 --rounds 5 --json remeasured.json
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import typing
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.cli import doc_parser
from bridge.config import MeasureConfig

SCAN = 20
"""`best_kernels` looks at a workload's best `SCAN` x `top` records at most (each is built to key it)."""


def _workloads(database: str) -> dict[str, list]:
    """Workload -> the valid records of `database`, lowest reported latency first. A workload is named
    "<task>/<the first 8 digits of its structural hash>": a suite arm's database holds all of its
    network's tasks under one folder."""
    from data.records import read_records

    groups: dict[str, list] = {}
    for task in read_records([database]).tasks.values():
        for r in task.records:
            if r.valid:
                groups.setdefault(f"{task.name}/{r.workload.shash[:8]}", []).append(r)
    return {name: sorted(records, key=lambda r: r.latency) for name, records in groups.items()}


def _next_records(queues: dict[tuple, list], kept: dict[tuple, list], top: int) -> list[tuple]:
    """(workload, record) for each workload still short of `top` kept kernels: as many of its next
    records as it is short (taken off its queue)."""
    batch = []
    for k, queue in queues.items():
        short = top - len(kept[k])
        batch += [(k, record) for record in queue[:short]]
        del queue[:short]
    return batch


def best_kernels(databases: list[str], top: int, target, builder) -> list[tuple]:
    """(database, workload, record, schedule, artifact path) of the `top` kernels of each workload of
    `databases` with the lowest reported latency, lowest first, each kernel by its best record: a run
    that reuses measurements gives a kernel's twins one latency, so its top records can be one kernel.
    The records are built by `builder` (a `PooledLocalBuilder`, whose workers leave each build's
    `kernel_key` beside it) `top` a workload at a time, until each workload has `top` kernels or its
    best `SCAN` x `top` records were looked at; the kept builds are the ones measured, the others are
    removed. A record that does not build here is named and left out."""
    from tvm_env import ms

    queues = {(db, name): records[: SCAN * top] for db in databases for name, records in _workloads(db).items()}
    kept: dict[tuple, list] = {k: [] for k in queues}
    keys: dict[tuple, set] = {k: set() for k in queues}
    try:
        _keep_best(queues, kept, keys, top, target, builder)
    except BaseException:  # the builds kept so far go with the failure
        for candidate in (c for k in kept for c in kept[k]):
            ms.utils.remove_build_dir(candidate[-1])
        raise
    return [candidate for k in kept for candidate in kept[k]]


def _keep_best(queues: dict, kept: dict, keys: dict, top: int, target, builder) -> None:
    """`best_kernels`' loop: builds each workload's next records until it has `top` kernels in `kept`."""
    from benchmarks.build_profile import replay
    from tvm_env import ms
    from tvm_env.kernel_reuse import read_key

    while batch := _next_records(queues, kept, top):
        schs = [replay(record) for _, record in batch]
        built = builder.build([ms.builder.BuilderInput(sch.mod, target) for sch in schs])
        for (k, record), sch, b in zip(batch, schs, built):
            if b.error_msg is not None:
                print(
                    f"{record.source}: does not build here, left out: {b.error_msg.splitlines()[-1]}", file=sys.stderr
                )
                continue
            key = read_key(b.artifact_path)
            if key is not None and key in keys[k]:  # a twin of a kernel kept already
                ms.utils.remove_build_dir(str(b.artifact_path))
                continue
            keys[k].add(key)
            kept[k].append((*k, record, sch, str(b.artifact_path)))


def remeasure(databases: list[str], target, top: int, rounds: int, measure) -> dict[str, dict]:
    """database -> workload -> {"reported_us", "remeasured_us", "of_reported_best_us", "kernels"}: the
    database's best, the best median over the rounds of its `top` best kernels (`best_kernels`), the
    median of the record it reported best, and each kernel's reported latency and readings, round by
    round (the spread of a kernel's readings is the re-measurement's own noise)."""
    from bridge.reread import measure_rounds
    from bridge.workers import make_runner
    from tvm_env import PooledLocalBuilder, ms

    builder, runner, candidates = PooledLocalBuilder(), make_runner(measure, target), []
    try:
        candidates = best_kernels(databases, top, target, builder)
        device = "cpu" if target.kind.name in ("llvm", "c") else target.kind.name
        inputs = [
            ms.runner.RunnerInput(path, device, ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True))
            for *_, sch, path in candidates
        ]
        readings = measure_rounds(runner, inputs, rounds)
        for candidate, read in zip(candidates, readings):
            if not all(math.isfinite(x) for x in read):
                raise RuntimeError(f"{candidate[2].source}: its measurement failed here")
    finally:
        builder.shutdown()
        if hasattr(runner, "shutdown"):
            runner.shutdown()
        for *_, path in candidates:
            ms.utils.remove_build_dir(path)
    out: dict[str, dict] = {}
    for (db, workload, record, *_), values in zip(candidates, readings):
        median = statistics.median(values) * 1e6
        row = out.setdefault(db, {}).setdefault(
            workload,
            {
                "reported_us": record.latency * 1e6,
                "remeasured_us": math.inf,
                "of_reported_best_us": median,
                "kernels": [],
            },
        )
        row["remeasured_us"] = min(row["remeasured_us"], median)
        row["kernels"].append({"reported_us": record.latency * 1e6, "readings_us": [v * 1e6 for v in values]})
    return out


def parse_with_target(parser, argv: list[str] | None):
    """`parser`'s arguments (`--top` and `--rounds` checked) and their `--target`, parsed, with this
    process set up for it (TVM imported here, after the parse)."""
    args = parser.parse_args(argv)
    if args.top < 1 or args.rounds < 1:
        parser.error(f"--top ({args.top}) and --rounds ({args.rounds}) must be >= 1")
    import tvm_env

    target = tvm_env.parse_target(args.target)
    tvm_env.setup(target)
    return args, target


def main(argv: list[str] | None = None) -> dict[str, dict]:
    parser = doc_parser(__doc__)
    parser.add_argument("--databases", type=list[str], required=True, help="tuning databases (folders)")
    parser.add_argument(
        "--target", default="nvidia/nvidia-h100", help="the target to build for (this machine's device)"
    )
    parser.add_argument("--top", type=int, default=5, help="the best N kernels of each workload")
    parser.add_argument("--rounds", type=int, default=5, help="measurements of each")
    parser.add_argument("--min-repeat-ms", type=int, default=100, help="as the runs measured (tune.py's default)")
    parser.add_argument(
        "--timer",
        choices=typing.get_args(typing.get_type_hints(MeasureConfig)["timer"]),
        default="evaluator",
        help="how each kernel is timed (`tune.py --timer`): 'evaluator', as the runs measured; 'graph', as CUDA "
        "graphs, the kernels' own time without the host's launches (a GPU only)",
    )
    parser.add_argument("--json", default=None, help="write the figures here too")
    args, target = parse_with_target(parser, argv)
    out = remeasure(
        args.databases, target, args.top, args.rounds, MeasureConfig(min_repeat_ms=args.min_repeat_ms, timer=args.timer)
    )
    rows = [
        f"| {db} | {workload} | {r['reported_us']:.3f} | {r['of_reported_best_us']:.3f} | {r['remeasured_us']:.3f} "
        f"| {r['remeasured_us'] / r['reported_us']:.3f} |"
        for db, workloads in out.items()
        for workload, r in workloads.items()
    ]
    header = (
        f"| database | workload | reported best (us) | its record re-measured | best of its top {args.top} re-measured"
    )
    print("\n".join([header + " | re-measured / reported |", "|---|---|---|---|---|---|", *rows]))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    main()
