"""Fit PAM on a shard folder with a plain Lightning Trainer (no LightningCLI, so no jsonargparse:
the device run's size limit leaves no room for its wheel) and keep the best epoch by validation
pairwise accuracy. Same module, data and hyper-parameters as `train.py fit --config configs/pam.yaml`.

    python benchmarks/gpu/fit_pam.py SHARDS OUT_DIR [--epochs 40] [--accelerator gpu]
"""

import argparse

import lightning as L
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint

from data.datamodule import ShardDataModule
from pruner_models.module import PAMModule

parser = argparse.ArgumentParser()
parser.add_argument("shards")
parser.add_argument("out")
parser.add_argument("--epochs", type=int, default=40)
parser.add_argument("--accelerator", default="auto")
args = parser.parse_args()

L.seed_everything(0, verbose=False)
gpu = args.accelerator == "gpu"
dm = ShardDataModule(args.shards, split="within-task", test_fraction=0.0, val_fraction=0.15, data_on_device=gpu)
best = ModelCheckpoint(
    dirpath=args.out, filename="best", monitor="val_pairwise_acc", mode="max", enable_version_counter=False
)
trainer = L.Trainer(
    accelerator=args.accelerator,
    precision="bf16-mixed" if gpu else "32-true",
    max_epochs=args.epochs,
    gradient_clip_val=0.5,
    callbacks=[best, EarlyStopping("val_pairwise_acc", mode="max", patience=10)],
    logger=False,
    enable_progress_bar=False,
    enable_model_summary=False,
)
trainer.fit(PAMModule(), dm)
print(
    f"best {best.best_model_path}: val_pairwise_acc {float(best.best_model_score):.3f} (epoch {trainer.current_epoch})"
)
