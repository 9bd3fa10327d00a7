"""Where the collector's time goes per record: sampling, building, running (data/collect.py).

`python benchmarks/collect_speed.py --target '{"kind": "llvm", "mcpu": "sapphirerapids", "num-cores": 2}'
--op conv2d:1,56,56,64,64,3,1,1 --n 32`

Two build batches are timed: the first includes starting the builder's worker pool (each worker
imports tvm and torch), the second is the steady state the pooled builder reaches in a long run.
"""

from __future__ import annotations

import argparse
import time

from data.collect import CollectConfig, Measurer, sample_schedules
from data.zoo import operator_task
from tvm_env import ms, parse_target, setup


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", required=True)
    p.add_argument("--op", default="conv2d:1,56,56,64,64,3,1,1", help="operator spec (data.zoo.operator_task)")
    p.add_argument("--n", type=int, default=32, help="schedules per build batch")
    p.add_argument("--builder-workers", type=int, default=None)
    args = p.parse_args()

    target = parse_target(args.target)
    setup(target)
    spec = operator_task(args.op)
    cfg = CollectConfig(target=args.target, out="unused", ops=[args.op], builder_workers=args.builder_workers)

    t0 = time.perf_counter()
    schedules = sample_schedules(spec, target, 2 * args.n, seed=0, exclude=set())
    t_sample = time.perf_counter() - t0
    cands = [ms.MeasureCandidate(s, ms.arg_info.ArgInfo.from_entry_func(s.mod, remove_preproc=True)) for s in schedules]

    t0 = time.perf_counter()
    measurer = Measurer(cfg, target)
    t_start = time.perf_counter() - t0
    timings = []
    for batch in (cands[: args.n], cands[args.n :]):
        t0 = time.perf_counter()
        built = measurer.builder.build([ms.builder.BuilderInput(c.sch.mod, target) for c in batch])
        t_build = time.perf_counter() - t0
        ok = [(b, c) for b, c in zip(built, batch) if b.error_msg is None]
        t0 = time.perf_counter()
        futures = measurer.runner.run(
            [ms.runner.RunnerInput(b.artifact_path, measurer.device_type, c.args_info) for b, c in ok]
        )
        results = [f.result() for f in futures]
        t_run = time.perf_counter() - t0
        for b in built:
            if b.artifact_path:
                ms.utils.remove_build_dir(b.artifact_path)
        timings.append((t_build, t_run, len(ok), sum(r.error_msg is None for r in results)))

    n = len(schedules) // 2
    print(f"op {args.op} ({spec.flops:.3g} FLOPs), target {target.export()['kind']}, {n} schedules per batch")
    print("| phase | seconds | per record |\n|---|---|---|")
    print(f"| sample {2 * n} schedules | {t_sample:.1f} | {t_sample / (2 * n):.3f} |")
    print(f"| start builder + runner | {t_start:.1f} | |")
    for i, (t_build, t_run, n_built, n_ran) in enumerate(timings):
        label = "first (pool start)" if i == 0 else "second (pool warm)"
        print(f"| build, {label}, {n_built}/{n} ok | {t_build:.1f} | {t_build / n:.3f} |")
        print(f"| run, {label}, {n_ran} ok | {t_run:.1f} | {t_run / max(n_ran, 1):.3f} |")


if __name__ == "__main__":
    main()
