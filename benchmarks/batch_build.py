"""What a tuning round's batch costs to build with the tuning runs' builder, all cores at once.

`build_profile.py` times one candidate's build steps on one core. A tuning round builds a batch of
picks with `tvm_env.PooledLocalBuilder` on every core the process may use, and waits for the last of
them. This takes `--picks` schedules that a tuning database measured, builds them in batches of
`--batch` with a warm builder of `--workers` workers (default: the usable cores), and, for
comparison, the first `--serial` of them one at a time on one worker. It prints and writes:

- each batch's wall-clock seconds, and their mean a pick;
- the serial seconds a pick (core-seconds), whose mean x batch / workers is the batch's ideal time
  when the work spreads evenly, and whose largest is a batch's floor;
- the builder parent's CPU seconds (its share of the work: serializing the modules, the pool's IPC);
- the workers' CPU and busy (wall) seconds on each batch (`PooledLocalBuilder.last_batch`), the
  figures a tuning curve's `build_cpu_s` and `build_work_s` columns hold, to compare with them.

    python benchmarks/batch_build.py \
        --databases "[benchmarks/results/suite_databases/ablations/ab2_fill64_src512/batch_matmul_12x128x128x64/pruner-s0]" \
        --picks 128 --batch 64 --serial 16 --json_out benchmarks/results/batch_build.json

Needs NVRTC and the CUDA headers, as `build_profile.py` does.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jsonargparse import CLI

from benchmarks.build_profile import _cpu_name, measured_schedules
from data.atomic import atomic_write_text
from tvm_env import PooledLocalBuilder, ms, nvrtc, parse_target, setup, usable_cores


def _timed_build(builder: PooledLocalBuilder, mods: list, target) -> tuple[float, float, int]:
    """(wall seconds, this process's CPU seconds, failed builds) of one `builder.build` call."""
    wall, cpu = time.perf_counter(), time.process_time()
    results = builder.build([ms.builder.BuilderInput(m, target) for m in mods])
    return time.perf_counter() - wall, time.process_time() - cpu, sum(r.error_msg is not None for r in results)


def batch_build(
    databases: tuple[str, ...],
    target: str = "nvidia/nvidia-h100",
    picks: int = 128,
    batch: int = 64,
    serial: int = 16,
    workers: int = 0,
    max_source_kb: float | None = None,
    seed: int = 0,
    json_out: Path | None = None,
) -> dict:
    """Time batches of measured schedules on all workers, and some of them one at a time.

    Args:
        databases: tuning databases (work dirs of `benchmarks/tuning.py` arms, plain or xz).
        target: a CUDA target (tag or JSON dict).
        picks: schedules taken from each database (random, `seed`).
        batch: schedules a batch.
        serial: of each database's picks, how many to build again one at a time on one worker.
        workers: the builder's workers (0: the cores this process may use).
        max_source_kb: the builder's source guard (None: off), as `tune.py --max-source-kb`.
        seed: sampling seed.
        json_out: where to write the figures.
    """
    os.environ.setdefault("CUDA_PATH", nvrtc.cuda_path())
    tgt = parse_target(target)
    setup(tgt)
    workers = workers or usable_cores()
    pool = PooledLocalBuilder(max_workers=workers, max_source_kb=max_source_kb)
    one = PooledLocalBuilder(max_workers=1, max_source_kb=max_source_kb)
    pool.warm()
    one.warm()
    out: dict = {"cpu": _cpu_name(), "workers": workers, "batch": batch, "max_source_kb": max_source_kb}
    for database in databases:
        mods = [s.mod for s in measured_schedules(database, picks, seed)]
        batches = []
        for i in range(0, len(mods), batch):
            wall, cpu, failed = _timed_build(pool, mods[i : i + batch], tgt)
            batches.append(
                {"picks": len(mods[i : i + batch]), "wall_s": wall, "parent_cpu_s": cpu, "failed": failed}
                | pool.last_batch
            )
            print(
                f"{database}: batch of {batches[-1]['picks']}: {wall:.2f} s wall, parent {cpu:.2f} s CPU, "
                f"workers {pool.last_batch['build_cpu_s']:.2f} s CPU / {pool.last_batch['build_work_s']:.2f} s busy, "
                f"{failed} failed"
            )
        each = [_timed_build(one, [m], tgt)[0] for m in mods[:serial]]
        mean = statistics.mean(each) if each else float("nan")
        summary = {
            "batches": batches,
            "batch_s_a_pick": sum(b["wall_s"] for b in batches) / len(mods),
            "serial_s": each,
            "serial_mean_s": mean,
            "serial_max_s": max(each, default=float("nan")),
            "ideal_batch_s": mean * batch / workers,
        }
        out[database] = summary
        print(
            f"{database}: {summary['batch_s_a_pick']:.3f} s a pick in batches of {batch} on {workers} workers; "
            f"one at a time {mean:.3f} s a pick (slowest {summary['serial_max_s']:.2f}); "
            f"an even spread would take {summary['ideal_batch_s']:.2f} s a batch"
        )
    if json_out:
        atomic_write_text(json_out, json.dumps(out, indent=1))
    return out


def main(argv: list[str] | None = None) -> dict:
    return CLI(batch_build, args=argv, as_positional=False)


if __name__ == "__main__":
    main()
