"""How well does PSA rank measured schedules? (docs/pruner.md section 4.4)

On measured records in feature shards (the PSA rows are stored there), ranks every task's records by
PSA score (each formula of `bridge.psa.FORMULAS`) and reports pairwise accuracy, peak@1 and peak@5
(the project's torchmetrics, `pruner_models.metrics`) next to a random ranking (mean of several
seeds) and the naive heuristic "more threads first" (grid x block). Optionally times PSA per
candidate on freshly sampled MetaSchedule candidates (featurize + score), in this process and with
the `WalkPool` of one worker per core.

    python benchmarks/psa_quality.py SHARDS --device h100 [--out psa_quality.csv]
    python benchmarks/psa_quality.py SHARDS --device h100 --time-candidates 512 --time-target nvidia/nvidia-h100
    python benchmarks/psa_quality.py SHARDS_OF_TUNING_DATABASES --pool-workloads
    python benchmarks/psa_quality.py SHARDS --artifacts benchmarks/weights/pam-suite-holdout-sm_90a.pt   # a learned model beside PSA
    python benchmarks/psa_quality.py SHARDS_OF_TUNING_DATABASES --pool-workloads --per-workload   # and a table per workload
    python benchmarks/psa_quality.py SHARDS --artifacts A.pt --blend 1 2   # and A blended with PSA (pruner_models.blend)
    python benchmarks/psa_quality.py SHARDS --stage-latencies 3e-5 7e-5 1e-4   # traffic-stages at other stage waits
    python benchmarks/psa_quality.py TUNING_DATABASES --records --workers 2 --pool-workloads \
        --stage-latencies 2e-5 7e-5 1e-4 --choose-stage-latency   # and each workload's held-out choice of them

`--records`: the inputs are database folders or record trees, featurized here for PSA alone
(`data.featurize.featurize_in_memory` without PerStoreFeature, a third of the featurizer's time; no
shards are written), so `--artifacts` cannot be ranked with it.

`--stage-latencies` also ranks with `traffic-stages` at each of those stage waits (`bridge.psa.
STAGE_LATENCY` is the default's). `--choose-stage-latency` (with `--pool-workloads`) chooses one of them
leaving each workload out in turn: the wait with the best pairwise + peak@1 + peak@5 summed over the
other workloads (each workload's metrics weighing the same), then scored on the one left out; it
prints each workload's choice and the held-out metrics' mean beside `traffic-occupancy`'s.

`--pool-workloads` ranks together every record of one workload (the hash at the end of a task
key), whichever database it came from, with labels recomputed against the pooled best: the
schedules that several tuning runs of one operator measured (`data.featurize` on their work
dirs, one task per work dir) are then ranked as one set, the way a draft sees an evolved population.

PSA is a GPU model: on CPU (llvm) records every program is one "thread", so its ranking there only
reflects the memory-work and flop columns.
"""

from __future__ import annotations

import csv
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from jsonargparse import ArgumentParser

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bridge.evaluate import score_shard_data
from bridge.export import load_model
from bridge.psa import DEFAULT_FORMULA, FORMULAS, get_device, naive_scores, psa_scores
from data.featurize import featurize_in_memory
from data.labels import normalized_throughput
from data.record_tree import task_name
from data.shards import read_shards
from pruner_models.blend import blend_with_psa
from pruner_models.metrics import PairwiseAccuracy, PeakScore


def evaluate(scores: np.ndarray, labels: np.ndarray, task: np.ndarray) -> dict[str, float]:
    """Pairwise accuracy, peak@1, peak@5 of one ranking (record-weighted over tasks, docs/pruner.md section 6)."""
    preds = torch.as_tensor(np.nan_to_num(scores, nan=-np.inf), dtype=torch.float64)
    labels_t, task_t = torch.as_tensor(labels, dtype=torch.float64), torch.as_tensor(task, dtype=torch.int64)
    out = {}
    for name, metric in (("pairwise", PairwiseAccuracy()), ("peak@1", PeakScore(1)), ("peak@5", PeakScore(5))):
        metric.set_dtype(torch.float64)
        metric.update(preds, labels_t, task_t)
        out[name] = float(metric.compute())
    return out


def pooled_groups(data) -> tuple[np.ndarray, np.ndarray]:
    """(group id, label) of every record when the tasks of one workload are pooled: tasks whose keys
    end in the same workload hash (`data.record_tree.task_dir`) form one group, and a record's label
    is `data.labels.normalized_throughput` over its group (the group's best finite latency / its
    latency, 0 when failed)."""
    suffix = [str(k)[len(task_name(str(k))) :] for k in data.task_key]  # "_<8 hex digits>"
    ids = {s: i for i, s in enumerate(dict.fromkeys(suffix))}
    group = np.array([ids[suffix[t]] for t in data.record_task], dtype=np.int64)
    latency = np.asarray(data.latency, dtype=np.float64)
    label = np.zeros(len(latency), dtype=np.float32)
    for g in range(len(ids)):
        members = group == g
        label[members] = normalized_throughput(latency[members])
    return group, label


def scorings(
    data, device, artifacts: Sequence[str] = (), stage_latencies: Sequence[float] = ()
) -> dict[str, np.ndarray]:
    """Ranking name -> scores of every record (higher = predicted faster): the naive heuristic, PSA
    with each formula (and `traffic-stages` at each of `stage_latencies`), and each learned model in
    `artifacts` (`bridge.export` files, e.g. the pretrained PAM a MoA run starts from)."""
    programs = data.psa_programs()
    out = {"naive: grid x block": naive_scores(programs)}
    for formula in FORMULAS:
        out[f"PSA {formula}"] = psa_scores(programs, device, formula)
    for latency in stage_latencies:
        out[f"PSA traffic-stages {latency:g}"] = psa_scores(programs, device, "traffic-stages", latency)
    for path in artifacts:
        out[f"model {Path(path).stem}"] = score_shard_data(load_model(path).net, data)
    return out


def blends(
    data,
    scores: dict[str, np.ndarray],
    artifacts: Sequence[str],
    weights: Sequence[float],
    keep: np.ndarray,
    pool: bool,
) -> dict[str, np.ndarray]:
    """ "model X + w PSA" -> each artifact's scores blended with PSA's (the default formula) at each
    weight, standardized over the kept records of each task (or pooled workload); -inf elsewhere."""
    group = pooled_groups(data)[0] if pool else np.asarray(data.record_task)
    psa = scores[f"PSA {DEFAULT_FORMULA}"]
    out = {}
    for path in artifacts:
        model = scores[f"model {Path(path).stem}"]
        for weight in weights:
            blended = np.full(len(model), -np.inf)
            blended[keep] = blend_with_psa(model[keep], psa[keep], group[keep], weight)
            out[f"model {Path(path).stem} + {weight:g} PSA"] = blended
    return out


def rankings(
    data, scores: dict[str, np.ndarray], random_seeds: int, keep: np.ndarray, pool: bool = False
) -> dict[str, list[dict[str, float]]]:
    """Ranking name -> metric dicts (one per random seed for 'random') over the records `keep`
    (with `pool`, the tasks of one workload ranked as one group: `pooled_groups`) of the random
    ranking and of each of `scores` (`scorings`)."""
    group, label = pooled_groups(data) if pool else (data.record_task, data.label)
    labels, task = label[keep], group[keep]
    n = int(keep.sum())
    out = {"random": [evaluate(np.random.default_rng(s).random(n), labels, task) for s in range(random_seeds)]}
    for name, values in scores.items():
        out[name] = [evaluate(values[keep], labels, task)]
    return out


def per_workload(data, scores: dict[str, np.ndarray], keep: np.ndarray) -> dict[str, dict[str, dict]]:
    """Workload -> ranking name -> metrics of each of `scores` (`scorings`), each workload's records
    pooled (`pooled_groups`); a workload is named by the folder above its first record's work dir
    (the suite's workload slug)."""
    group, label = pooled_groups(data)
    first = {g: np.flatnonzero(keep & (group == g))[0] for g in np.unique(group[keep])}
    names = {g: Path(str(data.record_source[i]).split(":")[0]).parent.parent.name for g, i in first.items()}
    out = {}
    for g, name in names.items():
        if list(names.values()).count(name) > 1:  # a network's tasks: the name and the workload's hash
            key = str(data.task_key[data.record_task[first[g]]])
            name += key[len(task_name(key)) :]
        members = keep & (group == g)
        out[name] = {k: evaluate(v[members], label[members], group[members]) for k, v in scores.items()}
        out[name]["records"] = int(members.sum())
    return out


def choose_stage_latency(table: dict[str, dict[str, dict]], latencies: Sequence[float]) -> dict[str, dict]:
    """Workload -> {"chosen": the stage wait chosen without it, "held_out": its metrics at that wait,
    "base": its `traffic-occupancy` metrics}, from `per_workload`'s table (which must hold
    "PSA traffic-stages L" for every L of `latencies`)."""
    out = {}
    for left in table:
        total = {
            latency: sum(sum(table[w][f"PSA traffic-stages {latency:g}"].values()) for w in table if w != left)
            for latency in latencies
        }
        chosen = max(latencies, key=lambda latency: total[latency])
        out[left] = {
            "chosen": chosen,
            "held_out": table[left][f"PSA traffic-stages {chosen:g}"],
            "base": table[left]["PSA traffic-occupancy"],
        }
    return out


def time_candidates(n: int, target: str, workload: str, device_name: str) -> dict[str, float]:
    """ms per candidate of PSACostModel.predict (featurize + score) in this process and with a WalkPool."""
    from bridge.psa import PSACostModel
    from data.zoo import operator_task
    from tvm_env import ms, parse_target, setup, tvm_ffi

    target = parse_target(target)
    setup(target)
    task = operator_task(workload)
    threads = os.cpu_count() or 1
    context = ms.TuneContext(
        mod=task.mod, target=target, space_generator="post-order-apply", num_threads=threads, rand_state=0
    ).clone()
    search = ms.search_strategy.EvolutionarySearch(population_size=n)
    search._initialize_with_tune_context(context)
    search.pre_tuning(n, n, context.generate_design_space(), ms.database.MemoryDatabase(), ms.cost_model.RandomModel())
    sample = tvm_ffi.get_global_func("s_tir.meta_schedule.SearchStrategyEvolutionarySearchSampleInitPopulation")
    schedules = list(sample(search, n))[:n]
    candidates = [
        ms.MeasureCandidate(s, ms.arg_info.ArgInfo.from_entry_func(s.mod, remove_preproc=True)) for s in schedules
    ]
    out = {"candidates": len(candidates)}
    for name, workers in (("in-process", 0), (f"pool of {os.cpu_count()}", os.cpu_count() or 1)):
        model = PSACostModel(device=device_name, workers=workers)
        model.predict(context, candidates[: min(len(candidates), 64)])  # start the pool
        start = time.perf_counter()
        model.predict(context, candidates)
        out[name] = (time.perf_counter() - start) / len(candidates) * 1e3
    return out


def main(argv: list[str] | None = None) -> None:
    p = ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("shards", nargs="+", help="shard files or folders (data.shards); with --records, record folders")
    p.add_argument("--records", action="store_true", help="the inputs are record folders: PSA rows featurized here")
    p.add_argument("--workers", type=int, default=1, help="with --records: featurizing processes")
    p.add_argument("--device", default="h100", help="PSA device row (configs/devices.yaml)")
    p.add_argument("--devices-file", default=None, help="YAML file with more device rows")
    p.add_argument("--keep-failed", action="store_true", help="keep failed measurements (label 0); dropped by default")
    p.add_argument("--random-seeds", type=int, default=20)
    p.add_argument("--pool-workloads", action="store_true", help="rank the tasks of one workload together")
    p.add_argument("--artifacts", nargs="*", default=[], help="learned models (bridge.export files) to rank beside PSA")
    p.add_argument(
        "--blend", type=float, nargs="*", default=[], help="also each artifact blended with PSA at these weights"
    )
    p.add_argument(
        "--per-workload", action="store_true", help="with --pool-workloads: also pairwise / peak@1 per workload"
    )
    p.add_argument(
        "--stage-latencies", type=float, nargs="*", default=[], help="also traffic-stages at these stage waits"
    )
    p.add_argument(
        "--choose-stage-latency",
        action="store_true",
        help="with --pool-workloads: choose one of --stage-latencies leaving each workload out in turn",
    )
    p.add_argument("--out", default=None, help="CSV to write")
    p.add_argument("--time-candidates", type=int, default=0, help="also time PSA on this many sampled candidates")
    p.add_argument("--time-target", default="nvidia/nvidia-h100")
    p.add_argument("--time-workload", default="conv2d:1,56,56,64,64,3,1,1")
    args = p.parse_args(argv)
    if args.choose_stage_latency and not (args.pool_workloads and args.stage_latencies):
        p.error("--choose-stage-latency needs --pool-workloads and --stage-latencies")
    if args.records and args.artifacts:
        p.error("--records featurizes PSA rows only; rank --artifacts on shards (python -m data.featurize)")

    device = get_device(args.device, args.devices_file)
    if args.records:
        data, summary = featurize_in_memory(args.shards, stmt=False, workers=args.workers)
        print(summary.format())
    else:
        data = read_shards(args.shards)
    keep = np.ones(data.num_records, bool) if args.keep_failed else np.isfinite(data.latency)
    kinds = sorted({json.loads(t).get("kind", "?") for t in data.task_target})
    print(
        f"{int(keep.sum())} records ({data.num_records - int(keep.sum())} failed dropped) of {data.num_tasks} tasks, "
        f"targets {', '.join(kinds)}; PSA device {device.name}"
    )
    # once, for the table and the per-workload table
    scores = scorings(data, device, args.artifacts, args.stage_latencies)
    scores.update(blends(data, scores, args.artifacts, args.blend, keep, args.pool_workloads))
    results = rankings(data, scores, args.random_seeds, keep, pool=args.pool_workloads)
    rows = []
    width = max(26, *(len(name) + 1 for name in results))
    print(f"{'ranking':<{width}} {'pairwise':>9} {'peak@1':>8} {'peak@5':>8}")
    for name, runs in results.items():
        mean = {k: float(np.mean([r[k] for r in runs])) for k in runs[0]}
        rows.append({"ranking": name, **mean, "records": int(keep.sum()), "tasks": data.num_tasks})
        print(f"{name:<{width}} {mean['pairwise']:>9.3f} {mean['peak@1']:>8.3f} {mean['peak@5']:>8.3f}")
    table = per_workload(data, scores, keep) if args.per_workload or args.choose_stage_latency else None
    if args.per_workload:
        names = [k for k in next(iter(table.values())) if k != "records"]
        print("pairwise / peak@1 per workload (pooled):")
        print("| workload | records | " + " | ".join(names) + " |")
        print("|---|---|" + "---|" * len(names))
        for workload, row in table.items():
            cells = [f"{row[k]['pairwise']:.3f} / {row[k]['peak@1']:.3f}" for k in names]
            print(f"| {workload} | {row['records']} | " + " | ".join(cells) + " |")
    if args.choose_stage_latency:
        choice = choose_stage_latency(table, args.stage_latencies)
        print("traffic-stages' stage wait chosen without each workload, scored on it:")
        print("| workload | chosen | held out: pairwise / peak@1 / peak@5 | traffic-occupancy |")
        print("|---|---|---|---|")
        for workload, c in choice.items():
            cells = [
                " / ".join(f"{c[k][m]:.3f}" for m in ("pairwise", "peak@1", "peak@5")) for k in ("held_out", "base")
            ]
            print(f"| {workload} | {c['chosen']:g} | {cells[0]} | {cells[1]} |")
        for k in ("held_out", "base"):
            mean = [np.mean([c[k][m] for c in choice.values()]) for m in ("pairwise", "peak@1", "peak@5")]
            print(
                f"mean over workloads, {'held out' if k == 'held_out' else 'traffic-occupancy'}: "
                + " / ".join(f"{v:.3f}" for v in mean)
            )
    if args.out:
        with open(args.out, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    if args.time_candidates:
        timing = time_candidates(args.time_candidates, args.time_target, args.time_workload, args.device)
        print(
            f"PSA featurize + score on {timing.pop('candidates')} sampled {args.time_workload} candidates ({args.time_target}):"
        )
        for name, ms_per in timing.items():
            print(f"  {name}: {ms_per:.2f} ms per candidate")


if __name__ == "__main__":
    main()
