"""LightningModules: thin training wrappers around the plain cost networks.

The networks (`PAMNet`, `MLPNet`, `MoANet`) stay separate `nn.Module`s so `bridge/` loads them with
`load_net(checkpoint)` and no Trainer. A module adds the loss, the optimizer, per-stage ranking
metrics logged per epoch, the normalization hand-off and the finetune start:

* Normalization: at `setup("fit")` the module copies the DataModule's `scales` (per-column maxima
  over the TRAINING records) into the net's buffers, so they are saved in every checkpoint.
  With `init_from` the pretrained weights AND scales are loaded instead (finetune), and the
  DataModule's scales are never computed. Validate/test keep the model's own scales.
* Hyper-parameters go into the checkpoint as plain types (the net config as a dict), so
  `torch.load(..., weights_only=True)` and `Module.load_from_checkpoint` both work.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, is_dataclass
from functools import partial
from typing import Any, Literal

import lightning as L
import torch
from torch import Tensor, nn
from torchmetrics import MeanMetric, MetricCollection

from data.schema import MODEL_SCHEMA_VERSION
from pruner_models import registry
from pruner_models.losses import GAIN_LOSSES, LOSSES, LossName
from pruner_models.metrics import ranking_metrics
from pruner_models.mlp import MLPConfig, MLPNet
from pruner_models.moa import MoANet
from pruner_models.pam import PAMConfig, PAMNet

__all__ = ["CostModelModule", "MLPModule", "MoAModule", "NonFiniteLossError", "PAMModule", "load_net"]


class NonFiniteLossError(FloatingPointError):
    """The training loss became NaN or inf: the fit stops before that epoch's checkpoint is written."""


def _config(cls: type, value: Any, name: str = "net") -> Any:
    """The config dataclass from the CLI (an instance) or from a checkpoint's hparams (a dict)."""
    if isinstance(value, cls):
        return value
    if isinstance(value, Mapping):
        return cls(**value)
    raise TypeError(f"{name} must be a {cls.__name__} or a dict of its fields, got {value!r}")


def _net_state(checkpoint: Mapping[str, Any], path: str) -> dict[str, Tensor]:
    """The `net.*` entries of a Lightning checkpoint's state dict, without the prefix."""
    if "state_dict" not in checkpoint:
        raise ValueError(f"{path}: not a Lightning checkpoint (no 'state_dict'); init_from needs a .ckpt")
    state = {k[len("net.") :]: v for k, v in checkpoint["state_dict"].items() if k.startswith("net.")}
    if not state:
        raise ValueError(f"{path}: the checkpoint has no 'net.*' weights")
    return state


class CostModelModule(L.LightningModule):
    """Shared training logic; subclasses build `self.net` (a module mapping a batch to (B,) scores).

    Args:
        loss: ranking loss computed within each task's records: lambdarank, ranknet, mse or lambdarank+mse.
        optimizer: adam (training from scratch) or sgd (the original's finetune).
        lr: learning rate (7e-4 in the original, for both).
        weight_decay: L2 weight decay (1e-6 in the original).
        init_from: a Lightning checkpoint whose net weights AND normalization start the fit
            (finetune to a new device). Loaded at the start of `fit`; None trains from scratch with
            the DataModule's training-set scales.
        gain_scale: c in LambdaRank's gain 2^(c label) - 1 (the losses with "lambdarank"; 1 = the
            original). Larger c weights the order among each task's fastest schedules more.
        truncation: k > 0 trains LambdaRank on NDCG@k (the losses with "lambdarank"; 0 = the whole
            list, the original): only pairs with a record among a task's top k predictions weigh.
    """

    def __init__(
        self,
        loss: LossName = "lambdarank",
        optimizer: Literal["adam", "sgd"] = "adam",
        lr: float = 7e-4,
        weight_decay: float = 1e-6,
        init_from: str | None = None,
        gain_scale: float = 1.0,
        truncation: int = 0,
    ) -> None:
        super().__init__()
        if loss not in LOSSES:
            raise ValueError(f"loss must be one of {sorted(LOSSES)}, got {loss!r}")
        if not gain_scale > 0 or (gain_scale != 1.0 and loss not in GAIN_LOSSES):
            raise ValueError(
                f"gain_scale must be > 0, and 1 unless the loss is one of {sorted(GAIN_LOSSES)}; got {gain_scale!r}"
            )
        if truncation < 0 or (truncation and loss not in GAIN_LOSSES):
            raise ValueError(
                f"truncation must be >= 0, and 0 unless the loss is one of {sorted(GAIN_LOSSES)}; got {truncation!r}"
            )
        if optimizer not in ("adam", "sgd"):
            raise ValueError(f"optimizer must be 'adam' or 'sgd', got {optimizer!r}")
        if lr <= 0:
            raise ValueError(f"lr must be > 0, got {lr!r}")
        # Collect the init args of this class and its subclass, then store them again as plain types
        # (dataclass configs as dicts) so checkpoints load with weights_only=True.
        self.save_hyperparameters()
        self.save_hyperparameters({k: asdict(v) if is_dataclass(v) else v for k, v in self.hparams.items()})
        self.loss_fn = (
            partial(LOSSES[loss], gain_scale=gain_scale, truncation=truncation) if loss in GAIN_LOSSES else LOSSES[loss]
        )
        # One instance per stage; the losses are metrics too, so DDP averages them over all records.
        self.val_metrics = ranking_metrics("val_")
        self.test_metrics = ranking_metrics("test_")
        self.val_loss = MeanMetric()
        self.test_loss = MeanMetric()
        self._nonfinite_steps: Tensor | None = None  # on the loss's device: counting costs no sync

    def forward(self, batch: Mapping[str, Tensor]) -> Tensor:
        """(B,) scores, higher = predicted faster."""
        return self.net(batch)

    def setup(self, stage: str) -> None:
        """Start a fit from `init_from` (weights + scales) or from the DataModule's train scales."""
        if stage != "fit":
            return
        if self.hparams.init_from:
            self.load_pretrained(self.hparams.init_from)
            return
        datamodule = self.trainer.datamodule if self._trainer is not None else None
        scales = getattr(datamodule, "scales", None)
        if scales is None:
            raise ValueError(
                "fitting from scratch needs the training-set normalization: use a DataModule with a "
                "`scales` attribute (data.datamodule.ShardDataModule), or set init_from"
            )
        self.net.set_scales(*scales)

    def load_pretrained(self, path: str) -> None:
        """Copy the net weights and normalization buffers of the checkpoint at `path`."""
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
        state = _net_state(checkpoint, path)
        try:
            self._load_net_state(state)
        except RuntimeError as err:
            raise ValueError(f"init_from={path!r} does not fit this model's net config: {err}") from err

    def _load_net_state(self, state: dict[str, Tensor]) -> None:
        if any(k.startswith("target.") for k in state):  # a MoA checkpoint: its momentum copy
            state = {k[len("target.") :]: v for k, v in state.items() if k.startswith("target.")}
        self.net.load_state_dict(state)

    def _step(self, batch: Mapping[str, Tensor]) -> tuple[Tensor, Tensor]:
        preds = self(batch)
        return preds, self.loss_fn(preds, batch["label"], batch["task"])

    def training_step(self, batch: Mapping[str, Tensor], batch_idx: int) -> Tensor:
        preds, loss = self._step(batch)
        bad = (~torch.isfinite(loss.detach())).to(torch.int64)
        self._nonfinite_steps = bad if self._nonfinite_steps is None else self._nonfinite_steps + bad
        self.log("train_loss", loss, on_step=True, on_epoch=True, prog_bar=True, batch_size=len(preds))
        return loss

    def validation_step(self, batch: Mapping[str, Tensor], batch_idx: int) -> None:
        self._evaluate(batch, self.val_loss, self.val_metrics)

    def test_step(self, batch: Mapping[str, Tensor], batch_idx: int) -> None:
        self._evaluate(batch, self.test_loss, self.test_metrics)

    def _evaluate(self, batch: Mapping[str, Tensor], loss: MeanMetric, metrics: MetricCollection) -> None:
        preds, value = self._step(batch)
        if len(preds):  # a DDP rank without data runs one empty batch (see TaskBatchSampler)
            loss.update(value, weight=len(preds))
        metrics.update(preds, batch["label"], batch["task"])

    def predict_step(self, batch: Mapping[str, Tensor], batch_idx: int) -> Tensor:
        return self(batch)

    def _check_finite_loss(self) -> None:
        """Stop the fit (NonFiniteLossError) once a training loss was NaN or inf on any rank.

        Checked once per epoch, before validation and before any checkpoint is written (one
        device sync), so a diverged model never becomes a "best" or last checkpoint.
        """
        if self._nonfinite_steps is None or self._trainer is None:
            return
        steps = int(self._nonfinite_steps.item())
        if self.trainer.strategy.reduce_boolean_decision(steps > 0, all=False):
            raise NonFiniteLossError(
                f"the training loss was NaN or inf in {steps} step(s) of epoch {self.current_epoch} on this rank; "
                "training stopped and no checkpoint of this epoch is written. Lower the learning rate "
                "(--model.init_args.lr) or clip gradients (--trainer.gradient_clip_val)"
            )

    def on_train_epoch_end(self) -> None:
        self._check_finite_loss()

    def on_validation_epoch_start(self) -> None:
        self._check_finite_loss()

    def on_validation_epoch_end(self) -> None:
        self._log_epoch("val", self.val_loss, self.val_metrics)

    def on_test_epoch_end(self) -> None:
        self._log_epoch("test", self.test_loss, self.test_metrics)

    def _log_epoch(self, stage: str, loss: MeanMetric, metrics: MetricCollection) -> None:
        # Both gather every record over the DDP ranks themselves (torchmetrics states), so the logged
        # values equal a single-process computation.
        self.log_dict({f"{stage}_loss": loss.compute(), **metrics.compute()})
        loss.reset()
        metrics.reset()

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self._check_finite_loss()
        # What readers without a Trainer need (load_net, bridge.export): the module class, the
        # feature schema the model was trained on, and the device(s) of its training data.
        checkpoint["cost_model"] = type(self).__name__
        checkpoint["schema_version"] = MODEL_SCHEMA_VERSION
        source = getattr(self.trainer.datamodule, "source_device", None) if self._trainer is not None else None
        if source:
            checkpoint["source_device"] = source

    def configure_optimizers(self) -> torch.optim.Optimizer:
        params = [p for p in self.net.parameters() if p.requires_grad]  # MoA: the online copy only
        if self.hparams.optimizer == "sgd":
            return torch.optim.SGD(params, lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)
        # Not fused: Lightning refuses gradient clipping (clip 0.5) under mixed precision with an
        # optimizer that unscales internally (seen on an H100 with bf16-mixed); foreach is the default.
        return torch.optim.Adam(params, lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)


class PAMModule(CostModelModule):
    """PAM (docs/pruner.md section 1.3).

    Args:
        net: layer sizes (PAMConfig; the defaults are the published ones).
        **kwargs: see CostModelModule (loss, optimizer, lr, weight_decay, init_from).
    """

    def __init__(self, net: PAMConfig = PAMConfig(), **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.net = PAMNet(_config(PAMConfig, net))


class MLPModule(CostModelModule):
    """The TenSet MLP baseline (docs/pruner.md section 3).

    Args:
        net: layer sizes (MLPConfig; the defaults are TenSet's).
        **kwargs: see CostModelModule (loss, optimizer, lr, weight_decay, init_from).
    """

    def __init__(self, net: MLPConfig = MLPConfig(), **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.net = MLPNet(_config(MLPConfig, net))


class MoAModule(CostModelModule):
    """MoA offline: pretrain on a source device (init_from), adapt on the target device's data.

    The online copy is trained by gradient and scores (val/test metrics are the online copy's, the
    copy that predicts during tuning). The momentum target follows by EMA once per training EPOCH:
    target <- momentum * target + (1 - momentum) * online, parameters only. An epoch over all the
    target device's records is the offline counterpart of one tuning-time adaptation round (which
    trains on all records measured so far), so the target moves as slowly as it does during tuning
    (about 40% of the way to the online copy after 50 epochs at 0.99). Unlike `MoANet.adapt`, the
    online copy is not reset from the target between epochs (that would throw away each epoch's
    training). Both copies are in the checkpoint (`net.online.*`, `net.target.*`); `init_from` a
    PAM checkpoint loads its weights into both.

    Args:
        net: PAM layer sizes of both copies.
        momentum: EMA momentum of the target (0.99 in the paper).
        **kwargs: see CostModelModule (loss, optimizer, lr, weight_decay, init_from).
    """

    def __init__(self, net: PAMConfig = PAMConfig(), momentum: float = 0.99, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.net = MoANet(_config(PAMConfig, net), momentum)

    def _load_net_state(self, state: dict[str, Tensor]) -> None:
        self.net.load_pretrained(state)

    def on_train_epoch_end(self) -> None:
        super().on_train_epoch_end()
        self.net.ema_update()


def load_net(path: str, map_location: str | torch.device = "cpu") -> nn.Module:
    """The trained network of a checkpoint (weights + normalization), in eval mode, without a Trainer.

    Args:
        path: a checkpoint written by train.py (PAMModule, MLPModule or MoAModule).
        map_location: device for the weights.

    Returns:
        A PAMNet, MLPNet or MoANet (its `config` attribute holds the layer sizes).
    """
    checkpoint = torch.load(path, map_location=map_location, weights_only=True)
    module_class = registry.by_module(checkpoint.get("cost_model"), path).module_class()
    hparams = checkpoint.get("hyper_parameters", {})
    module = module_class(**{k: v for k, v in hparams.items() if not k.startswith("_")})
    module.load_state_dict(checkpoint["state_dict"])
    return module.net.to(map_location).eval()
