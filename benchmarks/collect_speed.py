"""End-to-end speed of the dataset collector (data/collect.py): valid records per second, and where
the time went, for the sequential way and the pipelined one side by side.

`python benchmarks/collect_speed.py --target '{"kind": "llvm", "num-cores": 2}'
--workload conv2d:1,28,28,64,64,3,1,1 matmul:128,128,128 --records 48`

Each mode collects the same plan with the same seeds into a fresh temporary folder (MetaSchedule's
threaded sampling does not repeat its schedules exactly from run to run, so the modes measure the
same tasks, not the same list of schedules),
in its own process (no warm caches from the mode before), and reports from `StageTimes`:

* `sequential`: sample a task, build a whole batch, run it, commit it (`--sequential`).
* `pipelined`: the collector's default (on a CPU target measured here, runs wait for idle cores).
* `overlapped`: pipelined with runs overlapping builds (`--overlap-runs`; the default on GPU and
  RPC targets, here only to show the overlap on CPU: timings taken that way are noisy).
* `src512`: pipelined with `--max-source-kb 512` (CUDA kernels over 512 KB of source are refused
  before NVRTC and not stored): on the GPU machine, `--modes pipelined src512` side by side.

`--root DIR` measures the tasks already in a record tree instead (`data.collect --top-up`: no
extraction; each mode tops up its own copy of DIR to `--per-task`), e.g. the unfinished tasks of the
dataset (`benchmarks/gpu/pending_root.py`); `--keep DIR` keeps each mode's tree as DIR/<mode>, so a
device call's records join the dataset afterwards (`python -m data.merge DIR/pipelined data/h100`,
then DIR/<the other mode>: merge drops a schedule already stored):

    python benchmarks/collect_speed.py --target nvidia/nvidia-h100 --root pending --per-task 48 \
      --seconds 240 --modes pipelined src512 --min-repeat-ms 10 --timeout 20 --keep runs/speed_keep

Wall time counts from the first sample to the last commit (task extraction excluded), worker
start-up included. Build time is the time the build pool was busy, run time the runners' busy time.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

from jsonargparse import SUPPRESS, ArgumentParser, Namespace

MODES = {
    "sequential": {"sequential": True},
    "pipelined": {},
    "overlapped": {"overlap_runs": True},
    "src512": {"max_source_kb": 512.0},  # pipelined, CUDA kernels over 512 KB of source refused (not stored)
}


def _one(args: Namespace) -> dict:
    """Collect once in this process (mode `args.mode`); the StageTimes as a dict."""
    import dataclasses

    from data.collect import CollectConfig, collect
    from data.collect_pipeline import StageTimes

    tasks = len(args.workload) + len(args.network)
    per_task = args.per_task or math.ceil(args.records / max(1, tasks))
    times = StageTimes()
    with tempfile.TemporaryDirectory(prefix="collect_speed_") as out:
        if args.root:
            shutil.copytree(args.root, out, dirs_exist_ok=True)  # this mode's own copy to top up
        cfg = CollectConfig(
            target=args.target,
            out=out,
            ops=tuple(args.workload),
            networks=tuple(args.network),
            max_tasks=args.max_tasks,
            per_task=per_task,
            batch_size=args.batch_size,
            builder_workers=args.workers,
            repeat=args.repeat,
            min_repeat_ms=args.min_repeat_ms,
            runners=args.runners,
            deadline=args.seconds,
            timeout=args.timeout,
            top_up=bool(args.root),
            **MODES[args.mode],
        )
        collect(cfg, times)
        if args.keep:
            shutil.copytree(out, os.path.join(args.keep, args.mode))
    return dataclasses.asdict(times)


def _row(mode: str, t: dict) -> str:
    wall = t["wall_s"] or float("nan")
    return (
        f"| {mode} | {t['records']} ({t['valid']}) | {wall:.1f} | {t['valid'] / wall:.3f} | {t['sample_s']:.1f} | "
        f"{t['build_s']:.1f} ({t['build_s'] / wall:.0%}) | {t['run_s']:.1f} ({t['run_s'] / (wall * t['runners']):.0%}) "
        f"| {t['commit_s']:.2f} | {t['first_commit_s']:.1f} | {t.get('refused', 0)} |"
    )


def main() -> None:
    p = ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", required=True, help="as for data.collect (tag or JSON dict)")
    p.add_argument("--workload", nargs="*", default=[], help="operator specs (data.zoo.operator_task)")
    p.add_argument("--network", nargs="*", default=[], help="zoo networks (give --per-task)")
    p.add_argument("--root", default=None, help="top up the tasks of this record tree instead (each mode a copy)")
    p.add_argument("--keep", default=None, help="keep each mode's record tree as KEEP/<mode> (must not exist)")
    p.add_argument("--max-tasks", type=int, default=None, help="per network: the heaviest N tasks")
    p.add_argument("--records", type=int, default=48, help="records per mode (split over the operators)")
    p.add_argument("--per-task", type=int, default=None, help="records per task (instead of --records)")
    p.add_argument("--seconds", type=float, default=None, help="stop each mode after this many seconds")
    p.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    p.add_argument("--workers", type=int, default=None, help="build workers (default: all cores)")
    p.add_argument("--batch-size", type=int, default=None, help="chunk size (default: the collector's)")
    p.add_argument("--runners", type=int, default=None, help="parallel runners (default: the collector's)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--min-repeat-ms", type=int, default=20)
    p.add_argument("--timeout", type=float, default=60.0, help="seconds a build or run may take")
    p.add_argument("--mode", default=None, help=SUPPRESS)  # one mode, in a child process
    args = p.parse_args()
    if bool(args.root) == bool(args.workload or args.network):
        p.error("give --workload and/or --network, or --root")
    if args.root and not args.per_task:
        p.error("--root needs --per-task (the records each task is topped up to)")
    if args.root and not os.path.isdir(args.root):
        p.error(f"--root {args.root}: no such folder")
    if args.keep and not args.mode and os.path.exists(args.keep):
        p.error(f"--keep {args.keep} exists; remove it or name another")

    if args.mode:
        print("RESULT " + json.dumps(_one(args)), flush=True)
        return

    rows = {}
    for mode in args.modes:
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, __file__, *sys.argv[1:], "--mode", mode], capture_output=True, text=True, check=False
        )
        lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
        if done.returncode or not lines:
            sys.exit(f"{mode} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
        rows[mode] = json.loads(lines[-1].removeprefix("RESULT "))
        print(
            f"{mode}: {time.perf_counter() - start:.0f} s in all; {_row(mode, rows[mode])}", file=sys.stderr, flush=True
        )

    first = rows[args.modes[0]]
    print(
        f"target {args.target}; {os.cpu_count()} cores, {first['builders']} build workers, {first['runners']} runner(s)"
    )
    print(
        "| mode | records (valid) | wall s | valid records/s | sample s | build s (pool busy) "
        "| run s (runners busy) | commit s | first chunk stored at s | refused (source limit) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for mode, t in rows.items():
        print(_row(mode, t))


if __name__ == "__main__":
    main()
