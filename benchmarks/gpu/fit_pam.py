"""Fit PAM on a shard folder with a plain Lightning Trainer and keep the best epoch by validation
pairwise accuracy. Same module, data and hyper-parameters as `train.py fit --config configs/pam.yaml`.
Not LightningCLI: that needs jsonargparse[signatures] (typeshed-client too), and a device run has
only what .devkit/pylib.tar.xz carries (jsonargparse and docstring_parser, put on PYTHONPATH by
benchmarks/gpu/pylib.sh), which is enough for this script's own jsonargparse CLI.

    python benchmarks/gpu/fit_pam.py SHARDS OUT_DIR [--epochs 40] [--accelerator gpu]
"""

import lightning as L
from jsonargparse import CLI
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint

from data.datamodule import ShardDataModule
from pruner_models.module import PAMModule


def fit_pam(shards: str, out: str, epochs: int = 40, accelerator: str = "auto") -> None:
    """Fit PAM on a shard folder and keep the best epoch (OUT/best.ckpt) by validation pairwise accuracy.

    Args:
        shards: the shard folder (data.featurize output).
        out: where best.ckpt goes.
        epochs: max epochs (early stopping after 10 without a better val pairwise accuracy).
        accelerator: Lightning's accelerator; gpu also trains in bf16-mixed with the data on the GPU.
    """
    L.seed_everything(0, verbose=False)
    gpu = accelerator == "gpu"
    dm = ShardDataModule(shards, split="within-task", test_fraction=0.0, val_fraction=0.15, data_on_device=gpu)
    best = ModelCheckpoint(
        dirpath=out, filename="best", monitor="val_pairwise_acc", mode="max", enable_version_counter=False
    )
    trainer = L.Trainer(
        accelerator=accelerator,
        precision="bf16-mixed" if gpu else "32-true",
        max_epochs=epochs,
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


if __name__ == "__main__":
    CLI(fit_pam)
