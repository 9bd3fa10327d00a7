"""Which unroll steps a ranking puts first on a workload's measured schedules, against where the
fastest schedules are.

Explicit unrolling (`pragma_auto_unroll_max_step`, which MetaSchedule samples per block) is the
decision that makes CUDA kernels big. On the suite's 3x3 conv, MoA's arms picked step 1024 far more
often than Pruner's (docs/benchmarks.md, "Where MoA's 3x3 conv picks go"). Whether that preference
is the pretrained verifier's before the run adapts it can be measured without a GPU, on the records
the arms measured. For feature shards of tuning databases (`data.featurize` on arms' work dirs),
this finds each record's unroll step (its trace replayed from the database line its shard names),
scores every record with PSA and with each artifact (alone, and blended with PSA at each of
`--blend`'s weights), and prints, per workload (the records of every
task of one workload hash, pooled), each step's share of:

- all measured records;
- the `--top` fastest of them (by measured latency);
- each ranking's `--top` first (by predicted speed).

A ranking whose first picks sit on a step that the fastest do not is one that sends a search there.

    python -m data.featurize <the arms' work dirs> --out runs/conv3_shards --workers 2
    python benchmarks/step_bias.py --shards runs/conv3_shards --artifacts "[bridge/weights/pam-cuda-sm_90a.pt]" \
        --blend "[1]" --json_out benchmarks/results/step_bias_conv3x3.json
"""

from __future__ import annotations

import json
import math
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
from jsonargparse import CLI

from benchmarks.build_profile import replay
from benchmarks.psa_quality import pooled_groups
from benchmarks.source_size import unroll_step
from bridge.evaluate import score_shard_data
from bridge.export import load_model
from bridge.psa import DEFAULT_FORMULA, get_device, psa_scores
from data.atomic import atomic_write_text
from data.records import read_records
from data.shards import read_shards
from pruner_models.blend import blend_with_psa
from tvm_env import parse_target, setup


def record_steps(sources: np.ndarray) -> np.ndarray:
    """The unroll step of each record named by `sources` ("<tuning record file>:<line>", as shards
    store them), read from its database and replayed."""
    wanted = {str(s) for s in sources}
    by_source = {}
    for folder in sorted({str(Path(s.rpartition(":")[0]).parent) for s in wanted}):
        for task in read_records([folder]).tasks.values():
            by_source.update((r.source, r) for r in task.records if r.source in wanted)
    missing = wanted - by_source.keys()
    if missing:
        raise ValueError(f"{len(missing)} shard records are not in their databases, e.g. {sorted(missing)[0]}")
    steps = {s: unroll_step(replay(r)) for s, r in by_source.items()}
    return np.array([steps[str(s)] for s in sources], dtype=np.int64)


def shares(steps: np.ndarray) -> dict[str, float]:
    """Each step's share of `steps` (keys: the steps as strings, ascending)."""
    counts = Counter(int(s) for s in steps)
    return {str(k): counts[k] / len(steps) for k in sorted(counts)}


def step_bias(
    shards: str,
    artifacts: tuple[str, ...] = (),
    blend: tuple[float, ...] = (),
    device: str = "h100",
    target: str = "nvidia/nvidia-h100",
    top: float = 0.05,
    json_out: Path | None = None,
) -> dict:
    """Per workload, each unroll step's share of all records, of the fastest and of each ranking's first.

    Args:
        shards: feature shards (a folder of `*.h5`) of tuning databases.
        artifacts: learned models (`bridge.export` files) to rank beside PSA.
        blend: PSA weights at which each artifact is also ranked blended with PSA
            (`pruner_models.blend.blend_with_psa` over each workload's records, as `--psa-weight`).
        device: PSA's device row (`bridge.psa.get_device`).
        target: the CUDA target the schedules were tuned for (to replay them).
        top: the share of a workload's measured records taken as its fastest and as a ranking's first.
        json_out: where to write the shares.
    """
    if not 0 < top <= 1:
        raise ValueError(f"--top {top} must be in (0, 1]")
    setup(parse_target(target))
    data = read_shards(shards)
    psa = psa_scores(data.psa_programs(), get_device(device), DEFAULT_FORMULA)
    rankings = {f"PSA {DEFAULT_FORMULA}": psa}
    group = pooled_groups(data)[0]
    latency = np.asarray(data.latency, dtype=np.float64)
    ran = np.isfinite(latency)  # the blend standardizes over the records that are ranked
    for path in artifacts:
        model = rankings[f"model {Path(path).stem}"] = score_shard_data(load_model(path).net, data)
        for weight in blend:
            blended = np.full(len(model), -np.inf)
            blended[ran] = blend_with_psa(model[ran], psa[ran], group[ran], weight)
            rankings[f"model {Path(path).stem} + {weight:g} PSA"] = blended
    steps = record_steps(np.asarray(data.record_source))
    out: dict = {"shards": shards, "top": top, "workloads": {}}
    for g in np.unique(group):
        members = np.flatnonzero((group == g) & np.isfinite(latency))
        k = max(1, math.ceil(top * len(members)))
        name = str(data.task_key[int(data.record_task[members[0]])]).rpartition("_")[2]
        row = {
            "records": len(members),
            "top_k": k,
            "all": shares(steps[members]),
            "fastest": shares(steps[members[np.argsort(latency[members], kind="stable")[:k]]]),
            "rankings": {
                r: shares(steps[members[np.argsort(-scores[members], kind="stable")[:k]]])
                for r, scores in rankings.items()
            },
        }
        out["workloads"][name] = row
        _print(name, row)
    if json_out:
        atomic_write_text(json_out, json.dumps(out, indent=1))
    return out


def _print(name: str, row: dict) -> None:
    columns = {"all records": row["all"], f"fastest {row['top_k']}": row["fastest"], **row["rankings"]}
    steps = sorted({int(s) for c in columns.values() for s in c})
    print(f"\nworkload {name}: {row['records']} measured records; share at each unroll step")
    print("  " + " | ".join(["step", *columns]))
    for step in steps:
        print("  " + " | ".join([str(step), *(f"{c.get(str(step), 0.0):.0%}" for c in columns.values())]))


def main(argv: list[str] | None = None) -> dict:
    return CLI(step_bias, args=argv, as_positional=False)


if __name__ == "__main__":
    main()
