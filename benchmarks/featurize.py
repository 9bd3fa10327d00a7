"""Featurizer speed: records/s/core of the full featurizer next to MetaSchedule's PerStoreFeature alone.

Both start from the same records and include the trace replay; one process, one TVM thread
(TVM_NUM_THREADS=1, TuneContext.num_threads=1), so CPU seconds are core seconds. Best of --repeat.

    python benchmarks/featurize.py [RECORDS...] [--cuda-sample N] [--repeat 3]

RECORDS default to tests/fixtures/tiny_records (measured llvm records). --cuda-sample N adds N
MetaSchedule candidates each of a CUDA matmul and conv2d (nvidia/nvidia-h100, sampled from the
design spaces, no GPU needed), written to a temporary database and read back as records.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from jsonargparse import ArgumentParser

os.environ.setdefault("TVM_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from data.featurize import featurize_task
from data.records import ReadSummary, Task, read_records

ROOT = Path(__file__).resolve().parents[1]


def cuda_sample(n: int, work: Path) -> Path:
    """A JSON database of n sampled CUDA candidates per workload (unmeasured: run_secs None)."""
    from tvm import te
    from tvm.s_tir.meta_schedule.testing import te_workload

    import tvm_env
    from tvm_env import ms, tvm, tvm_ffi

    target = tvm_env.parse_target("nvidia/nvidia-h100")
    tvm_env.setup(target)
    sample_init = tvm_ffi.get_global_func("s_tir.meta_schedule.SearchStrategyEvolutionarySearchSampleInitPopulation")
    db_dir = work / "cuda_sampled"
    db_dir.mkdir()
    db = ms.database.JSONDatabase(work_dir=str(db_dir))
    for tensors in (te_workload.matmul(512, 512, 512), te_workload.conv2d_nhwc(1, 28, 28, 128, 128, 3, 1, 1)):
        mod = tvm.IRModule({"main": te.create_prim_func(tensors)})
        strategy = ms.search_strategy.EvolutionarySearch(init_measured_ratio=0.0, population_size=n)
        ctx = ms.TuneContext(
            mod=mod,
            target=target,
            space_generator="post-order-apply",
            search_strategy=strategy,
            task_name="bench",
            num_threads=1,
            rand_state=0,
        )
        ctx.pre_tuning(
            max_trials=n,
            num_trials_per_iter=n,
            design_spaces=ctx.generate_design_space(),
            database=db,
            cost_model=ms.cost_model.RandomModel(),
        )
        workload = db.commit_workload(mod)
        for sch in list(sample_init(strategy, n))[:n]:
            db.commit_tuning_record(ms.database.TuningRecord(sch.trace, workload, None, target))
    return db_dir


def timed(tasks: list[Task], repeat: int, **parts) -> tuple[float, float]:
    """Best (CPU s, wall s) over `repeat` runs of featurize_task on every task."""
    best = (float("inf"), float("inf"))
    for _ in range(repeat):
        c0, w0 = time.process_time(), time.perf_counter()
        for task in tasks:
            featurize_task(task, ReadSummary(), **parts)
        best = min(best, (time.process_time() - c0, time.perf_counter() - w0))
    return best


def main(argv: list[str] | None = None) -> None:
    p = ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("records", nargs="*", default=[str(ROOT / "tests" / "fixtures" / "tiny_records")])
    p.add_argument("--cuda-sample", type=int, default=0, help="sampled CUDA candidates per workload")
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as work:
        sets = {"records": list(args.records)}
        if args.cuda_sample:
            sets["cuda sampled"] = [str(cuda_sample(args.cuda_sample, Path(work)))]
        print(
            "| records | n | PerStoreFeature alone (rec/s/core) | full featurizer (rec/s/core) | full / alone (CPU) | wall alone / full (s) |"
        )
        print("|---|---|---|---|---|---|")
        for name, paths in sets.items():
            tasks = list(read_records(paths, failed="zero").tasks.values())
            n = sum(len(t.records) for t in tasks)
            timed(tasks, 1)  # warm-up: imports, intrinsics, first-call caches
            alone = timed(tasks, args.repeat, walk=False)
            full = timed(tasks, args.repeat)
            print(
                f"| {name} | {n} | {n / alone[0]:.1f} | {n / full[0]:.1f} | {full[0] / alone[0]:.2f}x "
                f"| {alone[1]:.2f} / {full[1]:.2f} |"
            )


if __name__ == "__main__":
    main()
