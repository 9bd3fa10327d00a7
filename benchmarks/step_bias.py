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

With `--adapt_on DB` (a tuning database in the shards), each of `--adapt_variants` (`adapt_replay.py`'s
learners: `moa-K`, the pretrained artifact adapted every K-th batch; `pam`, a PAM from nothing) also
learns DB's records in the order they were measured, in batches of `--batch`, as a run's verifier
does, and ranks the pooled records after each of `--adapt_batches` batches: does learning from a
run's own batches undo a preference, or teach it?

    python -m data.featurize <the arms' work dirs> --out runs/conv3_shards --workers 2
    python benchmarks/step_bias.py --shards runs/conv3_shards --artifacts "[bridge/weights/pam-cuda-sm_90a.pt]" \
        --blend "[1]" --json_out benchmarks/results/step_bias_conv3x3.json
    python benchmarks/step_bias.py --shards runs/conv3_shards --artifacts "[bridge/weights/pam-cuda-sm_90a.pt]" \
        --adapt_on <a MoA arm's work dir> --json_out benchmarks/results/step_bias_conv3x3_adapted.json
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

from benchmarks.adapt_replay import record_features, variant_model
from benchmarks.build_profile import replay
from benchmarks.gate_replay import database_records
from benchmarks.psa_quality import blends, pooled_groups
from benchmarks.source_size import unroll_step
from bridge.evaluate import score_shard_data
from bridge.export import load_model
from bridge.psa import DEFAULT_FORMULA, get_device, psa_scores
from data.atomic import atomic_write_text
from data.records import read_records
from data.shards import read_shards
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


def adapted_rankings(
    data, shards: str, db: str, artifact: str | None, variants: tuple[str, ...], after: tuple[int, ...], batch: int
) -> dict[str, np.ndarray]:
    """ "<variant> after <n> batches" -> scores of every record of `data` (-inf where it failed) by the
    learner after learning `db`'s first n batches in measurement order (`step_bias`'s `adapt_on`)."""
    if batch < 1 or not after or min(after) < 1:
        raise ValueError(f"--batch {batch} and every --adapt_batches {list(after)} must be >= 1")
    order = database_records(data, db, shards)
    ran = np.flatnonzero(np.isfinite(np.asarray(data.latency, dtype=np.float64)))
    tasks = np.unique(data.record_task)
    out = {}
    for name in variants:
        model = variant_model(name, artifact, 0, 50)
        if model is None:
            raise ValueError(f"--adapt_variants {name!r}: a learner (psa does not learn)")
        for t in tasks:
            model.tags[str(data.task_key[t])] = data.task_tags[t]
        for n in range(1, max(after) + 1):
            part = order[(n - 1) * batch : n * batch]
            if not len(part):
                break  # the run measured fewer batches: no ranking is named after ones it did not
            for t in np.unique(data.record_task[part]):
                mine = part[data.record_task[part] == t]
                latency = np.asarray(data.latency[mine], dtype=np.float64)
                model.learn(str(data.task_key[t]), [record_features(data, i) for i in mine], latency)
            if n in after:
                scores = np.full(len(data.latency), -np.inf)
                for t in tasks:
                    mine = ran[data.record_task[ran] == t]
                    scores[mine] = model.score_features(str(data.task_key[t]), [record_features(data, i) for i in mine])
                out[f"{name} after {n} batches"] = scores
    return out


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
    adapt_on: str | None = None,
    adapt_variants: tuple[str, ...] = ("moa-4", "moa-1", "pam"),
    adapt_batches: tuple[int, ...] = (4, 16, 32),
    batch: int = 32,
    json_out: Path | None = None,
) -> dict:
    """Per workload, each unroll step's share of all records, of the fastest and of each ranking's first.

    Args:
        shards: feature shards (a folder of `*.h5`) of tuning databases.
        artifacts: learned models (`bridge.export` files) to rank beside PSA.
        blend: PSA weights at which each artifact is also ranked blended with PSA
            (`psa_quality.blends`: over each workload's records, as `--psa-weight`).
        device: PSA's device row (`bridge.psa.get_device`).
        target: the CUDA target the schedules were tuned for (to replay them).
        top: the share of a workload's measured records taken as its fastest and as a ranking's first.
        adapt_on: a tuning database (work dir) in `shards` whose records the adapting variants learn.
        adapt_variants: learners (`adapt_replay.variant_model`; `moa-K` adapts the first artifact).
        adapt_batches: after how many of its batches each learner ranks the records.
        batch: records a batch.
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
    if adapt_on is not None:
        artifact = artifacts[0] if artifacts else None
        rankings.update(adapted_rankings(data, shards, adapt_on, artifact, adapt_variants, adapt_batches, batch))
    for path in artifacts:
        rankings[f"model {Path(path).stem}"] = score_shard_data(load_model(path).net, data)
    rankings.update(blends(data, rankings, artifacts, blend, ran, pool=True))
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
