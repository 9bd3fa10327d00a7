"""What a rank of test_metrics.py's 2-process gloo run does, in a module of its own: a spawned rank
imports this module to find its function, and this one imports what the ranks use only (not pytest,
scipy and the reference implementations of the test module)."""

import os
from pathlib import Path

import torch
import torch.distributed as dist

from pruner_models.metrics import PairwiseAccuracy, ranking_metrics


def update_in_batches(metric, preds, labels, task, n_batches=3):
    for chunk in zip(*(x.tensor_split(n_batches) for x in (preds, labels, task))):
        metric.update(*chunk)
    return metric


def ddp_worker(rank: int, world: int, port: int, data_path: str, out_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    preds, labels, task = torch.load(data_path)
    # Interleaved shards like DistributedSampler; N is odd so the shards differ in length.
    shard = slice(rank, None, world)
    collection = ranking_metrics("val_")
    update_in_batches(collection, preds[shard], labels[shard], task[shard])
    # A rank that sees no record at all (torchmetrics' empty-rank path).
    lonely = PairwiseAccuracy()
    if rank == 0:
        update_in_batches(lonely, preds, labels, task)
    result = {name: value.item() for name, value in collection.compute().items()}
    result["lonely_pairwise"] = lonely.compute().item()
    torch.save(result, Path(out_dir) / f"rank{rank}.pt")
    dist.destroy_process_group()
