"""Where a CUDA candidate's build time goes, step by step, and TVM's NVRTC compile against ours.

Builds need no GPU, so this runs on the host: for `--per-workload` sampled schedules of each
workload on `--target`, it times the steps of `tvm.tirx.build` and of the builder's export
(MetaSchedule's `local_builder`), then compiles the generated CUDA to a cubin twice, with TVM 0.27's
NVRTC path (`tvm.support.nvcc.compile_cuda`) and with `tvm_env.nvrtc.compile_cuda` (the builder's:
the same code and options without the libcu++ headers the kernel does not use), and checks that
their kernels' PTX is the same. One process, one core: the figures are core-seconds a candidate.

    python benchmarks/build_profile.py --per_workload 8 --json_out benchmarks/results/build_profile.json

`--databases` profiles, instead of fresh samples, `--per_workload` of the schedules each tuning
database measured (work dirs of `benchmarks/tuning.py` arms, plain or xz): do the schedules one
method picks cost more to build than another's?

    python benchmarks/build_profile.py --databases benchmarks/results/suite_databases/dense_128x3072x768/{xgb,pruner,moa}-s0 \
        --per_workload 16 --json_out benchmarks/results/build_profile_suite.json

Needs cuda-bindings and NVRTC (`pip install -e ".[cuda]"`) and the CUDA toolkit's headers
(CUDA_PATH, or nvcc on the PATH).
"""

from __future__ import annotations

import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jsonargparse import CLI

from data.atomic import atomic_write_text
from data.records import read_records
from data.sampler import sample_schedules
from data.zoo import operator_task
from tvm_env import nvrtc, parse_target, setup, tvm

OPERATORS = (
    "dense:128,3072,768",
    "batch_matmul:12,128,128,64",
    "conv2d:1,35,35,192,64,1,1,0",
    "conv2d:1,35,35,64,96,3,1,1",
    "depthwise_conv2d:1,28,28,240,5,1,2",
)
"""The tuning suite's single operators (benchmarks/tuning.py)."""

STEPS = ("lower", "split+finalize", "cuda codegen", "host codegen", "export", "nvrtc (TVM)", "nvrtc (ours)")


def profile_one(mod: tvm.IRModule, target: tvm.target.Target) -> tuple[dict[str, float], bool]:
    """Seconds of each build step of one candidate (and its CUDA source's KB, `source_kb`), and
    whether both compiles give the same kernel."""
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock
    from tvm.support import nvcc
    from tvm.support.tar import tar

    build = sys.modules["tvm.tirx.build"]  # the module; `tvm.tirx.build` is its function
    secs: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(step: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        secs[step] = now - clock
        clock = now

    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    host = tvm.target.Target("llvm")
    mod = tvm.tirx.transform.BindTarget(target.with_host(host))(mod)
    pipeline, finalize_host, finalize_device = tvm.tirx.get_default_tir_pipeline(target)
    mod = pipeline(mod)
    lap("lower")
    host_mod, device_mods = build.split_host_device_mods(mod)
    host_mod = finalize_host()(host_mod)
    device_mods = {t: finalize_device()(m) for t, m in device_mods.items()}
    lap("split+finalize")
    (device,) = [build.codegen_build(m, t) for t, m in device_mods.items() if len(m.functions)]
    code = device.inspect_source()
    lap("cuda codegen")
    runtime = build.codegen_build(host_mod, host)
    runtime.import_module(device)
    lap("host codegen")
    runtime.export_library(os.path.join(tempfile.mkdtemp(), "m.tar"), fcompile=tar)
    lap("export")
    nvcc.compile_cuda(code, target_format="cubin", arch=target.arch, compiler="nvrtc")
    lap("nvrtc (TVM)")
    nvrtc.compile_cuda(code, "cubin", arch=target.arch)
    lap("nvrtc (ours)")
    same = nvrtc.kernel_lines(
        nvcc.compile_cuda(code, target_format="ptx", arch=target.arch, compiler="nvrtc")
    ) == nvrtc.kernel_lines(nvrtc.compile_cuda(code, "ptx", arch=target.arch))
    secs["source_kb"] = len(code) / 1024  # not a step: NVRTC's time follows it (as source_size.py counts)
    return secs, same


def replay(record) -> tvm.s_tir.Schedule:
    """A measured record's schedule: its trace replayed on its workload (`data.records.Record`)."""
    sch = tvm.s_tir.Schedule(tvm.s_tir.meta_schedule.database.Workload.from_json(record.workload.as_json()).mod)
    tvm.s_tir.schedule.Trace.apply_json_to_schedule(record.trace, sch)
    return sch


def measured_schedules(database: str, n: int, seed: int) -> list:
    """`n` schedules (random, `seed`) of the ones a tuning database measured, replayed from their traces.
    Only records measured successfully: a failed one may be a schedule that TVM cannot build at all
    (a collector's random sample), which has no build time to profile."""
    records = [r for task in read_records([database]).tasks.values() for r in task.records if r.valid]
    random.Random(seed).shuffle(records)
    return [replay(record) for record in records[:n]]


def build_profile(
    workloads: tuple[str, ...] = OPERATORS,
    databases: tuple[str, ...] = (),
    target: str = "nvidia/nvidia-h100",
    per_workload: int = 8,
    seed: int = 0,
    json_out: Path | None = None,
) -> dict:
    """Profile the builds of sampled candidates; print a table; write `json_out`.

    Args:
        workloads: operator specs (data.zoo.operator_task), default the tuning suite's operators.
        target: a CUDA target (tag or JSON dict).
        databases: tuning databases to take the candidates from instead (`measured_schedules`);
            each is profiled as one "workload" named by its path.
        per_workload: candidates sampled per workload (or taken per database).
        seed: sampling seed.
        json_out: where to write the per-candidate seconds and the means.
    """
    os.environ.setdefault("CUDA_PATH", nvrtc.cuda_path())  # TVM's own search misses a wrapped nvcc
    tgt = parse_target(target)
    setup(tgt)
    rows, mismatched = [], []
    sources = {d: lambda d=d: measured_schedules(d, per_workload, seed) for d in databases} or {
        w: lambda w=w: sample_schedules(operator_task(w), tgt, per_workload, seed=seed, exclude=set())
        for w in workloads
    }
    for workload, schedules in sources.items():
        for i, sch in enumerate(schedules()):
            with tgt:
                secs, same = profile_one(sch.mod, tgt)
            rows.append({"workload": workload, "candidate": i, **secs, "same_kernel": same})
            if not same:
                mismatched.append(f"{workload}#{i}")
            print(
                workload,
                i,
                " ".join(f"{k} {v:.3f}" for k, v in secs.items()),
                "same" if same else "DIFFERENT",
                flush=True,
            )
    means = {step: statistics.mean(r[step] for r in rows) for step in STEPS}
    builds: dict[str, list[float]] = {}  # seconds of each candidate's build with our NVRTC, per source
    for r in rows:
        builds.setdefault(r["workload"], []).append(sum(r[s] for s in STEPS[:5]) + r["nvrtc (ours)"])
    by_source = {w: {"build_s_ours": statistics.mean(b), "max_s_ours": max(b)} for w, b in builds.items()}
    common = sum(means[s] for s in STEPS[:5])
    summary = {
        "candidates": len(rows),
        "mean_s": means,
        "build_s_tvm": common + means["nvrtc (TVM)"],
        "build_s_ours": common + means["nvrtc (ours)"],
        "same_kernel": len(rows) - len(mismatched),
        "mismatched": mismatched,
        "by_workload": by_source,
        "target": target,
        "cpu": _cpu_name(),
    }
    print(f"\n{len(rows)} candidates on {summary['cpu']}: mean seconds a candidate (one core)")
    for step in STEPS:
        print(f"  {step:16s} {means[step]:.3f}")
    print(
        f"  build with TVM's NVRTC {summary['build_s_tvm']:.3f} s, with ours {summary['build_s_ours']:.3f} s "
        f"({summary['build_s_ours'] / summary['build_s_tvm']:.2f}x); same kernel PTX {summary['same_kernel']}/{len(rows)}"
    )
    for w, b in by_source.items():
        print(f"  {w}: build {b['build_s_ours']:.3f} s a candidate (mean), slowest {b['max_s_ours']:.3f} s")
    if json_out:
        atomic_write_text(json_out, json.dumps({"summary": summary, "candidates": rows}, indent=1))
    return summary


def _cpu_name() -> str:
    try:
        return next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        return "unknown"


def main(argv: list[str] | None = None) -> dict:
    return CLI(build_profile, args=argv, as_positional=False)


if __name__ == "__main__":
    main()
