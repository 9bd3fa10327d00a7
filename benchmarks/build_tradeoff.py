"""What a source-size limit before the build saves in build time, and what it costs in speed.

A CUDA pick's build cost follows its source size (NVRTC parses every unrolled statement), and the
search can estimate that size before the build (`bridge.build_size`, `--size-filter-kb`). Whether a
limit pays off depends on two shares that need no GPU to measure: the build seconds a run spends on
picks over the limit (saved), and the fastest schedules that are over it (lost). For each tuning
database (a work dir of a `benchmarks/tuning.py` arm, plain or xz) this takes `--sample` random
measured schedules and, per workload (the databases' parent folder), the `--best` fastest of their
pooled records. Each is estimated, then built as a build worker builds it (`tvm_env.builder.fast_build`:
lowering and CUDA codegen, then our NVRTC compile to a cubin; one core, timed; no export, no run). Its measured
latency comes from the database. Printed per workload:

- how the estimate follows the build's seconds (Pearson r of the logs) and the source size;
- for each of `--limits` (KB, estimated): the share of sampled picks and of their build seconds over
  it, per arm; how many of the best schedules are over it; and the fastest latency left under it
  among the best, against the fastest.

    python benchmarks/build_tradeoff.py --databases "[benchmarks/results/suite_databases/ablations/moa_src256/conv2d_1x35x35x64x96x3x1x1/moa-s0, ...]" \
        --sample 40 --best 20 --json_out benchmarks/results/build_tradeoff.json

Needs cuda-bindings and NVRTC (`pip install -e ".[cuda]"`) and the CUDA toolkit's headers.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jsonargparse import CLI

from benchmarks.build_profile import replay
from benchmarks.source_size import log_r, unroll_step
from bridge.build_size import estimated_source_kb
from data.atomic import atomic_write_text
from data.records import read_records
from tvm_env import fast_build, nvrtc, parse_target, setup
from tvm_env.builder import tiny_kernel

LIMITS_KB = (64, 128, 256, 512)


def measure(record, target) -> dict | None:
    """One measured schedule: estimated KB (and the estimate's ms), build seconds and source KB, its
    unroll step and measured latency (us); None when it does not build."""
    sch = replay(record)
    start = time.perf_counter()
    estimate = estimated_source_kb(sch.mod, target)
    estimate_ms = 1e3 * (time.perf_counter() - start)
    start = time.perf_counter()
    try:
        code = _compile(sch.mod, target)
    except (RuntimeError, ValueError):  # TVM's errors (InternalError, ...) derive from these
        return None
    build_s = time.perf_counter() - start
    return {
        "estimated_kb": estimate,
        "estimate_ms": estimate_ms,
        "build_s": build_s,
        "source_kb": len(code) / 1024,
        "unroll_step": unroll_step(sch),
        "latency_us": record.latency * 1e6,
    }


def _compile(mod, target) -> str:
    """Build `mod` as a build worker does and return its CUDA source. A TVM without the CUDA runtime
    (this host's) generates the source but skips the compile, so our NVRTC compile, which the
    GPU machine's build calls, is run here on that source."""
    with target:
        (device,) = fast_build(mod, target, None).imports
    code = device.inspect_source()
    nvrtc.compile_cuda(code, "cubin", arch=target.arch)
    return code


def tradeoff(picks: list[dict], best: list[dict], limits: tuple[float, ...]) -> dict:
    """At each limit: the share of `picks` and of their build seconds estimated over it, and of the
    `best` (fastest first) how many are over it and the fastest latency under it / the fastest."""
    total_s = sum(p["build_s"] for p in picks)
    out = {}
    for limit in limits:
        over = [p for p in picks if p["estimated_kb"] > limit]
        under = [b["latency_us"] for b in best if b["estimated_kb"] <= limit]
        out[str(limit)] = {
            "picks_over": len(over) / len(picks),
            "build_s_over": sum(p["build_s"] for p in over) / total_s,
            "best_over": sum(b["estimated_kb"] > limit for b in best),
            "fastest_under_vs_fastest": (min(under) / best[0]["latency_us"]) if under else None,
        }
    return out


def build_tradeoff(
    databases: tuple[str, ...],
    target: str = "nvidia/nvidia-h100",
    sample: int = 40,
    best: int = 20,
    limits: tuple[float, ...] = LIMITS_KB,
    seed: int = 0,
    json_out: Path | None = None,
) -> dict:
    """Estimate and build sampled and best schedules; print the trade-off per workload; write `json_out`.

    Args:
        databases: tuning databases (work dirs), grouped into workloads by their parent folder.
        target: the CUDA target the schedules were tuned for.
        sample: measured schedules built per database (random valid records, `seed`; all when fewer).
        best: the fastest this-many of each workload's pooled records are built too.
        limits: estimated source sizes (KB) to weigh as a filter's limit.
        seed: sampling seed.
        json_out: where to write every schedule's figures and the summaries.
    """
    if sample < 2 or best < 1:
        raise ValueError(f"--sample {sample} must be >= 2 and --best {best} >= 1")
    os.environ.setdefault("CUDA_PATH", nvrtc.cuda_path())
    tgt = parse_target(target)
    setup(tgt)
    _compile(tiny_kernel(), tgt)  # NVRTC's first compile in a process loads it: not a pick's cost
    workloads: dict[str, dict] = {}
    for db in databases:
        records = [r for task in read_records([db]).tasks.values() for r in task.records if r.valid]
        if not records:
            raise ValueError(f"{db}: no measured records")
        w = workloads.setdefault(str(Path(db).parent), {"pooled": [], "arms": {}})
        w["pooled"].extend(records)
        picked = random.Random(seed).sample(records, min(sample, len(records)))
        rows = [m for m in (measure(r, tgt) for r in picked) if m is not None]
        w["arms"][Path(db).name] = rows
        print(f"{db}: {len(rows)} of {len(picked)} built", flush=True)
    out: dict = {"target": target, "limits_kb": list(limits), "workloads": {}}
    for name, w in workloads.items():
        top = sorted(w.pop("pooled"), key=lambda r: r.latency)[:best]
        fastest = [m for m in (measure(r, tgt) for r in top) if m is not None]
        picks = [p for rows in w["arms"].values() for p in rows]
        summary = {
            "r_log_estimate_build_s": log_r([p["estimated_kb"] for p in picks], [p["build_s"] for p in picks]),
            "r_log_source_build_s": log_r([p["source_kb"] for p in picks], [p["build_s"] for p in picks]),
            "build_s_median": statistics.median(p["build_s"] for p in picks),
            "estimate_ms_median": statistics.median(p["estimate_ms"] for p in picks),
            "arms": {arm: tradeoff(rows, fastest, limits) for arm, rows in w["arms"].items()},
            "best_estimated_kb": [b["estimated_kb"] for b in fastest],
        }
        out["workloads"][name] = {"summary": summary, "best": fastest, "arms": w["arms"]}
        _print(name, summary, limits)
    if json_out:
        atomic_write_text(json_out, json.dumps(out, indent=1))
    return out


def _print(name: str, s: dict, limits: tuple[float, ...]) -> None:
    print(
        f"\n{name}: build {s['build_s_median']:.2f} s a pick (median, one core); r(log) of build seconds with "
        f"the estimate {s['r_log_estimate_build_s']:.3f}, with the source {s['r_log_source_build_s']:.3f}; "
        f"an estimate {s['estimate_ms_median']:.0f} ms"
    )
    print("  its best, estimated KB: " + ", ".join(f"{kb:.0f}" for kb in s["best_estimated_kb"]))
    print(
        "  limit KB | "
        + " | ".join(f"{arm}: picks / build s over" for arm in s["arms"])
        + " | best over | fastest under"
    )
    for limit in limits:
        arms = [a[str(limit)] for a in s["arms"].values()]
        under = arms[0]["fastest_under_vs_fastest"]
        print(
            f"  {limit:8.0f} | "
            + " | ".join(f"{a['picks_over']:.0%} / {a['build_s_over']:.0%}" for a in arms)
            + f" | {arms[0]['best_over']} of {len(s['best_estimated_kb'])} | "
            + ("none" if under is None else f"{under:.3f}x")
        )


def main(argv: list[str] | None = None) -> dict:
    os.environ.setdefault("TVM_NUM_THREADS", "1")  # one core a build, as a build worker's (before TVM's pool starts)
    return CLI(build_tradeoff, args=argv, as_positional=False)


if __name__ == "__main__":
    main()
