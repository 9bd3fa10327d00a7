"""Ranking quality of the cost models on a shard folder: train each with train.py, test the best
epoch, and print one table (plus a random-ranking baseline on the same test records).

    python benchmarks/quality.py --shards data/embedded/shards --models pam mlp
    python benchmarks/quality.py --shards DIR --split hold-out --test-networks resnet_18 --epochs 50

Each model runs `train.py fit --config configs/<model>.yaml` then `train.py test` on its
best-epoch checkpoint, with the same split and seed, so the rows are comparable. Extra train.py
flags go after `--`, e.g. `-- --trainer.precision bf16-mixed --trainer.accelerator gpu`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from data.datamodule import ShardDataModule
from pruner_models.metrics import ranking_metrics
from train import main as train_main

METRICS = ("pairwise_acc", "peak@1", "peak@5", "top5_recall", "kendall_tau", "rmse")
REPO = Path(__file__).resolve().parents[1]


def random_baseline(data_args: list[str], seed: int) -> dict[str, float]:
    """Test metrics of uniformly random scores on the same test records."""
    options = dict(zip(data_args[::2], data_args[1::2]))
    dm = ShardDataModule(
        shards=options["--data.shards"], split=options["--data.split"],
        test_networks=json.loads(options["--data.test_networks"]) or None, seed=int(options["--data.seed"]),
    )  # fmt: skip
    dm.setup("test")
    metrics = ranking_metrics("test_")
    generator = torch.Generator().manual_seed(seed)
    for batch in dm.test_dataloader():
        metrics.update(torch.rand(len(batch["label"]), generator=generator), batch["label"], batch["task"])
    return {k: float(v) for k, v in metrics.compute().items()}


def run_model(model: str, data_args: list[str], root: Path, epochs: int, extra: list[str]) -> dict[str, float]:
    """Fit configs/<model>.yaml, then test its best checkpoint; returns the test metrics."""
    common = ["--config", str(REPO / "configs" / f"{model}.yaml"), *data_args]
    fit = train_main([
        "fit", *common, "--trainer.max_epochs", str(epochs), "--trainer.logger.init_args.save_dir", str(root), *extra,
    ])  # fmt: skip
    best = next(c.best_model_path for c in fit.trainer.checkpoint_callbacks if c.monitor)
    test = train_main(["test", *common, "--ckpt_path", best, "--trainer.logger", "false", *extra])
    return {k: float(v) for k, v in test.trainer.callback_metrics.items() if k.startswith("test_")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shards", required=True, help="shard folder or file")
    parser.add_argument("--models", nargs="+", default=["pam", "mlp"], choices=["pam", "mlp"])
    parser.add_argument("--split", default="within-task", choices=["within-task", "hold-out"])
    parser.add_argument("--test-networks", nargs="*", default=[], help="hold-out split: held-out networks")
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="runs/quality", help="run folder; results.json is written there")
    args, extra = parser.parse_known_args()
    extra = [a for a in extra if a != "--"]
    root = Path(args.out)
    data_args = [
        "--data.shards", args.shards, "--data.split", args.split,
        "--data.test_networks", json.dumps(args.test_networks), "--data.seed", str(args.seed),
    ]  # fmt: skip
    results = {"random": random_baseline(data_args, args.seed)}
    for model in args.models:
        results[model] = run_model(model, data_args, root, args.epochs, extra)

    split = args.split + (f" (held out: {', '.join(args.test_networks)})" if args.test_networks else "")
    table = Table(title=f"Test ranking metrics, {split}, {args.shards}")
    table.add_column("model")
    for name in METRICS:
        table.add_column(name, justify="right")
    for model, values in results.items():
        table.add_row(model, *(f"{values.get('test_' + name, float('nan')):.3f}" for name in METRICS))
    Console().print(table)
    root.mkdir(parents=True, exist_ok=True)
    (root / "results.json").write_text(json.dumps({"split": split, "shards": args.shards, "results": results}, indent=1))


if __name__ == "__main__":
    main()
