"""Training throughput of PAM (records/s for one epoch) on synthetic shards of realistic shape.

The original Pruner reported about 28,600 records/s for PAM training on its GPU; the target here
is >= 5x that on an H100 with bf16, so the data path must not be the bottleneck. The script
writes (once, cached in --shards-dir) synthetic HDF5 shards through the real writer, reads them
with the real ShardDataModule, and trains the full-size PAM with a real Lightning Trainer
(LambdaRank within tasks, Adam, clip 0.5, whole-task batches of ~512). Epoch 1 warms up (CUDA
context, kernels); the table reports every epoch, the LAST one is the number to quote. It also
times the data path alone (iterating the train loader, no model) to show the headroom.

    python benchmarks/train_speed.py                                   # CPU: 20k records
    python benchmarks/train_speed.py --accelerator gpu --precision bf16-mixed           # 1M records
    python benchmarks/train_speed.py --accelerator gpu --precision bf16-mixed --devices 2 --strategy ddp

Under DDP the records/s are summed over the ranks (every rank trains on its share of batches).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import lightning as L
import torch
from rich.console import Console
from rich.table import Table

from benchmarks.cli import doc_parser
from data.datamodule import ShardDataModule
from data.shards import list_shards
from data.synthetic import write_synthetic_shards
from pruner_models import losses
from pruner_models.module import PAMModule


class EpochTimer(L.Callback):
    """Wall time and records (summed over DDP ranks) of every training epoch."""

    def __init__(self) -> None:
        self.epochs: list[dict] = []

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._records = 0
        self._sync(pl_module)
        self._start = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._records += len(batch["label"])

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._sync(pl_module)
        seconds = time.perf_counter() - self._start
        records = int(
            trainer.strategy.reduce(torch.tensor(float(self._records), device=pl_module.device), reduce_op="sum")
        )
        self.epochs.append({"epoch": trainer.current_epoch, "records": records, "seconds": seconds})

    @staticmethod
    def _sync(pl_module: L.LightningModule) -> None:
        if pl_module.device.type == "cuda":
            torch.cuda.synchronize(pl_module.device)


def make_shards(directory: Path, records: int, records_per_task: int, tasks_per_shard: int) -> float:
    """Write the synthetic shards unless `directory` already holds them; returns the seconds spent."""
    if list_shards(directory) if directory.exists() else []:
        return 0.0
    start = time.perf_counter()
    num_tasks = max(1, records // records_per_task)
    num_shards = max(1, -(-num_tasks // tasks_per_shard))
    write_synthetic_shards(
        directory,
        num_shards=num_shards,
        num_tasks=min(num_tasks, tasks_per_shard),
        records_per_task=records_per_task,
        rows_per_record=(3, 10),
        workers=min(num_shards, os.cpu_count() or 1),
    )
    return time.perf_counter() - start


def data_path_speed(dm: ShardDataModule, device: torch.device) -> float:
    """Records/s of iterating one epoch of the train loader and moving batches to `device`."""
    loader = dm.train_dataloader()
    start, records = time.perf_counter(), 0
    for batch in loader:
        batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
        records += len(batch["label"])
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return records / (time.perf_counter() - start)


def main() -> None:
    parser = doc_parser(__doc__)
    parser.add_argument("--accelerator", default="auto", help="cpu, gpu or auto")
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--strategy", default="auto", help="auto, or ddp with --devices > 1")
    parser.add_argument("--precision", default=None, help="default: bf16-mixed on GPU, 32-true on CPU")
    parser.add_argument("--records", type=int, default=None, help="default: 1,000,000 on GPU, 20,000 on CPU")
    parser.add_argument("--records-per-task", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--epochs", type=int, default=2, help="the first one warms up")
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument("--data-on-device", choices=["auto", "yes", "no"], default="auto", help="auto: yes on GPU")
    parser.add_argument(
        "--shards-dir", default=None, help="cache of the synthetic shards (default runs/bench_shards_N)"
    )
    parser.add_argument(
        "--loss-path",
        choices=["auto", "pairs"],
        default="auto",
        help="auto: the dense sync-free loss on accelerators; pairs: the pair lists everywhere",
    )
    parser.add_argument("--json", default=None, help="also write the results to this JSON file")
    args = parser.parse_args()
    if args.loss_path == "pairs":
        losses.DENSE_MAX_BATCH = 0  # `use_dense` then never picks the dense masks

    gpu = args.accelerator == "gpu" or (args.accelerator == "auto" and torch.cuda.is_available())
    records = args.records or (1_000_000 if gpu else 20_000)
    precision = args.precision or ("bf16-mixed" if gpu else "32-true")
    on_device = args.data_on_device == "yes" or (args.data_on_device == "auto" and gpu)
    shards = Path(args.shards_dir or f"runs/bench_shards_{records}")
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    write_seconds = make_shards(shards, records, args.records_per_task, tasks_per_shard=100) if local_rank == 0 else 0.0
    if gpu:
        torch.backends.cuda.matmul.allow_tf32 = True

    L.seed_everything(0, verbose=False)
    dm = ShardDataModule(
        str(shards),
        batch_size=args.batch_size,
        val_fraction=0.0,
        test_fraction=0.0,
        num_workers=args.num_workers,
        data_on_device=on_device,
    )
    timer = EpochTimer()
    trainer = L.Trainer(
        accelerator=args.accelerator,
        devices=args.devices,
        strategy=args.strategy,
        precision=precision,
        max_epochs=args.epochs,
        gradient_clip_val=0.5,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[timer],
    )
    module = PAMModule()
    start = time.perf_counter()
    trainer.fit(module, dm)
    total = time.perf_counter() - start
    if trainer.global_rank != 0:
        return
    data_speed = data_path_speed(dm, trainer.strategy.root_device)

    device = torch.cuda.get_device_name() if gpu else f"CPU ({os.cpu_count()} cores, {torch.get_num_threads()} threads)"
    table = Table(title=f"PAM training speed: {device}")
    for col in ("epoch", "records", "seconds", "records/s"):
        table.add_column(col, justify="right")
    for e in timer.epochs:
        table.add_row(
            str(e["epoch"]), f"{e['records']:,}", f"{e['seconds']:.2f}", f"{e['records'] / e['seconds']:,.0f}"
        )
    console = Console()
    console.print(table)
    last = timer.epochs[-1]
    result = {
        "device": device,
        "devices": args.devices,
        "strategy": args.strategy,
        "precision": precision,
        "records": len(dm.store),
        "train_records": last["records"],
        "batch_size": args.batch_size,
        "data_on_device": on_device,
        "params": sum(p.numel() for p in module.parameters()),
        "records_per_s": last["records"] / last["seconds"],
        "data_path_records_per_s": data_speed,
        "fit_seconds": total,
        "shard_write_seconds": write_seconds,
        "torch": torch.__version__,
        "loss_path": args.loss_path,
    }
    console.print(
        f"last epoch: [bold]{result['records_per_s']:,.0f} records/s[/bold] "
        f"({precision}, {args.devices} device(s), batch {args.batch_size}, data on device: {on_device}, "
        f"loss path: {args.loss_path}); "
        f"data path alone: {data_speed:,.0f} records/s; original Pruner: ~28,600 records/s"
    )
    print(json.dumps(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
