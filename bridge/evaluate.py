"""Score an exported cost model (or a train.py checkpoint) on any feature shards; write the metrics as JSON.

    python -m bridge.evaluate pam.pt --shards runs/shards/cuda-sm_90a --json pam_h100.json
    python -m bridge.evaluate pam.pt --shards '[a, b.h5]' --networks '[resnet_50]' --json out.json

Every valid record of the shards is scored (failed measurements are dropped and counted), and the
metrics of docs/pruner.md section 6 are computed per task, then combined (`METRICS` says how):

| key | metric |
|---|---|
| pairwise_acc | pairwise comparison accuracy, record-weighted mean over tasks |
| peak@k | average peak score@k: mean over positions 1..k of the running best label of the top-k picks / the task's best; record-weighted mean over tasks |
| top{k}_recall | |predicted top-k intersected with the true top-k| / k, record-weighted mean over tasks |
| kendall_tau | Kendall tau-b, record-weighted mean over tasks |
| tenset_top@k | TenSet's top-k score: sum over tasks of weight x best latency / sum of weight x best latency among the top-k picks (task weights: how often a network calls the task) |

The JSON also holds the same metrics for each task (`per_task`: task key, name, records; TenSet's
score is per network, so not there), and `--worst N` prints the N tasks ranked worst.

peak@k and tenset_top@k are different numbers: peak@k averages the running best over the k
positions and weights tasks by their records; tenset_top@k takes the best of the k picks and
weights tasks by their share of the network's time. The JSON also records the model, the shards,
the counts and these definitions. Models are read with `torch.load(weights_only=True)` only.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence

import numpy as np
import torch
from jsonargparse import ActionConfigFile, ArgumentParser

from bridge.export import ArtifactError, load_model
from data.atomic import atomic_write_text
from data.batch import ProgramStore
from data.shards import ShardData, ShardError, read_shards
from pruner_models.metrics import KendallTau, PairwiseAccuracy, PeakScore, TopKRecall

__all__ = ["METRICS", "evaluate", "main", "score_records", "score_shard_data", "tenset_top_k"]

METRICS = {
    "pairwise_acc": "pairwise comparison accuracy (TenSet), per task, record-weighted mean over tasks",
    "peak@k": "average peak score@k (TenSet): mean over positions 1..k of (best label among the first i "
    "picks) / (task's best label), per task, record-weighted mean over tasks",
    "top{k}_recall": "|predicted top-k & true top-k| / k, per task, record-weighted mean over tasks",
    "kendall_tau": "Kendall tau-b per task, record-weighted mean over tasks",
    "tenset_top@k": "TenSet's top-k score: sum_t w_t * best_latency_t / sum_t w_t * min latency among the k "
    "highest-scored records of task t (w_t: the task's weight in its network)",
}
"""What each key of the JSON's `metrics` means (written into the JSON too)."""


def score_records(
    net: torch.nn.Module, store: ProgramStore, batch_size: int = 4096, indices: np.ndarray | None = None
) -> np.ndarray:
    """Scores (N,) float64 of every record of `store` in record order, or of the records `indices`
    names in that order; higher = predicted faster."""
    net.eval()
    order = torch.arange(len(store)) if indices is None else torch.as_tensor(np.asarray(indices), dtype=torch.long)
    out = []
    with torch.no_grad():
        for start in range(0, len(order), batch_size):
            batch = store[order[start : start + batch_size]]
            device = next(net.parameters()).device
            out.append(net({k: v.to(device) for k, v in batch.items()}).double().cpu().numpy())
    return np.concatenate(out) if out else np.zeros(0)


def score_shard_data(net: torch.nn.Module, data: ShardData, batch_size: int = 4096) -> np.ndarray:
    """Scores (N,) of every record of `data` (`data.shards.read_shards`' result), failed ones too."""
    return score_records(net, ProgramStore.from_shards(data), batch_size)


def tenset_top_k(scores: np.ndarray, latency: np.ndarray, task: np.ndarray, weight: np.ndarray, k: int) -> float:
    """TenSet's top-k score (module docstring) over all tasks present.

    Args:
        scores: (N,) predictions, higher = faster.
        latency: (N,) finite mean latencies in seconds.
        task: (N,) task index of each record.
        weight: (T,) task weights, indexed by `task`.
        k: picks per task (ties: the earlier record first).

    Returns:
        a ratio in (0, 1]; 1 when every task's top-k holds its fastest record.
    """
    if k < 1:
        raise ValueError(f"k={k!r} must be >= 1")
    best = picked = 0.0
    for t in np.unique(task):
        mine = np.flatnonzero(task == t)
        top = mine[np.argsort(-scores[mine], kind="stable")[:k]]
        best += weight[t] * latency[mine].min()
        picked += weight[t] * latency[top].min()
    return float(best / picked)


def evaluate(
    artifact: str | os.PathLike,
    shards: str | Sequence[str],
    *,
    networks: Sequence[str] | None = None,
    ks: Sequence[int] = (1, 5),
    batch_size: int = 4096,
    device: str = "cpu",
) -> dict:
    """Metrics of the model `artifact` on the valid records of `shards` (see the module docstring).

    Raises:
        ArtifactError: the model file cannot be used (names it).
        ShardError / ValueError: unreadable shards, no valid record, or a bad k or batch size.
    """
    if batch_size < 1 or not ks or any(k < 1 for k in ks):
        raise ValueError(f"batch_size={batch_size!r} and every k of ks={list(ks)!r} must be >= 1")
    model = load_model(artifact, map_location=device)
    data = read_shards(shards, networks=networks)
    valid = np.flatnonzero(np.isfinite(data.latency))
    if not len(valid):
        raise ValueError(f"shards={shards!r} (networks={networks!r}) hold no valid record to score")
    scores = score_shard_data(model.net, data, batch_size)[valid]
    task, latency = data.record_task[valid], data.latency[valid]
    label = torch.from_numpy(data.label[valid]).double()
    metrics = {"pairwise_acc": PairwiseAccuracy(), "kendall_tau": KendallTau()}
    for k in ks:
        metrics.update({f"peak@{k}": PeakScore(k=k), f"top{k}_recall": TopKRecall(k=k)})
    tasks, records = np.unique(task, return_counts=True)  # ascending ids: the order of compute_per_task
    per_task = [
        {"task": str(data.task_key[t]), "name": str(data.task_name[t]), "records": int(n)}
        for t, n in zip(tasks, records, strict=True)
    ]
    values = {}
    for name, metric in metrics.items():
        metric.set_dtype(torch.float64)
        metric.update(torch.from_numpy(scores), label, torch.from_numpy(task))
        values[name] = float(metric.compute())
        for row, value in zip(per_task, metric.compute_per_task()[1].tolist(), strict=True):
            row[name] = value
    for k in ks:
        values[f"tenset_top@{k}"] = tenset_top_k(scores, latency, task, data.task_weight, k)
    return {
        "artifact": os.fspath(artifact),
        "net_class": model.net_class,
        "source_device": model.source_device,
        "shards": [shards] if isinstance(shards, str | os.PathLike) else [os.fspath(s) for s in shards],
        "networks": None if networks is None else list(networks),
        "records": int(len(valid)),
        "tasks": len(tasks),
        "failed_dropped": int(data.num_records - len(valid)),
        "metrics": values,
        "per_task": per_task,
        "definitions": METRICS,
    }


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="python -m bridge.evaluate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", action=ActionConfigFile, help="a YAML file with any of these options")
    parser.add_argument("artifact", type=str, help="an artifact of python -m bridge.export, or a train.py .ckpt")
    parser.add_argument("--shards", type=list[str] | str, required=True, help="a shard folder, a .h5 file, or a list")
    parser.add_argument("--json", type=str | None, default=None, help="write the metrics to this JSON file")
    parser.add_argument(
        "--networks", type=list[str] | None, default=None, help="score only the tasks of these networks"
    )
    parser.add_argument("--ks", type=list[int], default=[1, 5], help="k of peak@k, top{k}_recall, tenset_top@k")
    parser.add_argument("--batch_size", type=int, default=4096, help="records scored per forward pass")
    parser.add_argument("--device", type=str, default="cpu", help="torch device to score on")
    parser.add_argument("--worst", type=int, default=0, help="also print the N tasks ranked worst (pairwise accuracy)")
    return parser


def main(argv: Sequence[str] | None = None) -> dict:
    """Parse `argv` (None: sys.argv), evaluate, print the metrics and write the JSON."""
    args = build_parser().parse_args(argv)
    result = evaluate(
        args.artifact, args.shards, networks=args.networks, ks=args.ks, batch_size=args.batch_size, device=args.device
    )
    print(f"{result['net_class']} on {result['records']} records of {result['tasks']} tasks")
    for name, value in result["metrics"].items():
        print(f"  {name:<16} {value:.4f}")
    if args.worst > 0:
        print(f"the {args.worst} tasks ranked worst (pairwise accuracy, peak@{args.ks[0]}, records):")
        for row in sorted(result["per_task"], key=lambda r: r["pairwise_acc"])[: args.worst]:
            print(f"  {row['pairwise_acc']:.3f}  {row[f'peak@{args.ks[0]}']:.3f}  {row['records']:5d}  {row['task']}")
    if args.json:
        atomic_write_text(args.json, json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.json}")
    return result


if __name__ == "__main__":
    try:
        main()
    except (ArtifactError, ShardError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
