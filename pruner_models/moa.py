"""MoA, momentum online adaptation (the "Siamese" PAM variant, docs/pruner.md section 2).

Two copies of PAM: the *target* (Siamese) copy starts as the pretrained cross-device model and is
never trained by gradient; the *online* copy is trained and predicts. `MoANet.adapt` is the
tuning-time update the bridge calls after every 4th measurement round:
online <- target; train online on all records measured so far (Adam 7e-4, up to 50 epochs);
target <- 0.99 target + 0.01 online (parameters only). The online copy predicts until the next call.

`train_online` is the plain training loop (no Trainer: the tuner calls it many times on a few
hundred records) shared by MoA's adaptation and by the from-scratch online modes (`pam`, `mlp`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import Tensor, nn

from pruner_models.losses import LOSSES, LossName
from pruner_models.pam import CostNet, PAMConfig, PAMNet

__all__ = ["MoANet", "train_online"]


def train_online(
    net: nn.Module,
    batches: Sequence[Mapping[str, Tensor]],
    *,
    epochs: int = 50,
    lr: float = 7e-4,
    weight_decay: float = 1e-6,
    loss: LossName = "lambdarank",
    clip: float | None = 0.5,
    patience: int | None = 5,
    seed: int = 0,
) -> list[float]:
    """Train `net` on task-grouped batches with Adam; early-stop on the training loss.

    Batches with fewer than 2 programs are skipped (no pair to rank; BatchNorm cannot train on one).
    The net is left in eval mode (scores then do not depend on the batch).

    Args:
        net: a cost network mapping a batch dict to (B,) scores.
        batches: batch dicts (`data.batch.make_batch`), each holding whole tasks' records,
            on the net's device.
        epochs: maximum passes over `batches`.
        lr, weight_decay: Adam settings (the original's 7e-4 and 1e-6).
        loss: a name in `pruner_models.losses.LOSSES`.
        clip: gradient-norm clip (None: no clipping).
        patience: stop after this many epochs without a lower mean training loss (None: never);
            the original early-stopped on the training loss too.
        seed: seeds the batch order of every epoch.

    Returns:
        The mean training loss of every epoch run.
    """
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs!r}")
    if loss not in LOSSES:
        raise ValueError(f"loss must be one of {sorted(LOSSES)}, got {loss!r}")
    loss_fn = LOSSES[loss]
    usable = [b for b in batches if b["label"].shape[0] >= 2]
    history: list[float] = []
    if not usable:
        net.eval()
        return history
    params = [p for p in net.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    generator = torch.Generator().manual_seed(seed)
    best, since_best = float("inf"), 0
    net.train()
    for _ in range(epochs):
        total = 0.0
        for i in torch.randperm(len(usable), generator=generator).tolist():
            batch = usable[i]
            value = loss_fn(net(batch), batch["label"], batch["task"])
            optimizer.zero_grad(set_to_none=True)
            value.backward()
            if clip is not None:
                torch.nn.utils.clip_grad_norm_(params, clip)
            optimizer.step()
            total += float(value.detach())
        history.append(total / len(usable))
        if history[-1] < best - 1e-9:
            best, since_best = history[-1], 0
        else:
            since_best += 1
            if patience is not None and since_best >= patience:
                break
    net.eval()
    return history


class MoANet(nn.Module):
    """Online + momentum target copies of PAM; `forward` scores with the online copy.

    State dict keys: `online.*` and `target.*` (both PAMNet state dicts, scales included).

    Args:
        config: PAM layer sizes of both copies.
        momentum: m in target <- m * target + (1 - m) * online (0.99 in the paper).
    """

    def __init__(self, config: PAMConfig = PAMConfig(), momentum: float = 0.99) -> None:
        super().__init__()
        if not 0.0 <= momentum <= 1.0:
            raise ValueError(f"momentum must be in [0, 1], got {momentum!r}")
        self.config = config
        self.momentum = momentum
        self.online = PAMNet(config)
        self.target = PAMNet(config)
        self.target.load_state_dict(self.online.state_dict())
        self.target.requires_grad_(False)

    def forward(self, batch: Mapping[str, Tensor]) -> Tensor:
        """(B,) scores of the online copy."""
        return self.online(batch)

    def set_scales(self, stmt_scale: Tensor, access_scale: Tensor | None = None) -> None:
        self.online.set_scales(stmt_scale, access_scale)
        self.target.set_scales(stmt_scale, access_scale)

    def load_pretrained(self, state: Mapping[str, Tensor]) -> None:
        """Load a PAMNet state dict into both copies, or a MoANet state dict as it is."""
        if any(k.startswith("target.") for k in state):
            self.load_state_dict(state)
        else:
            self.online.load_state_dict(state)
            self.target.load_state_dict(state)

    @torch.no_grad()
    def ema_update(self) -> None:
        """target <- momentum * target + (1 - momentum) * online, parameters only (buffers kept)."""
        for target, online in zip(self.target.parameters(), self.online.parameters()):
            target.lerp_(online, 1.0 - self.momentum)

    @torch.no_grad()
    def reset_online(self) -> None:
        """online <- target (parameters and buffers)."""
        self.online.load_state_dict(self.target.state_dict())

    def adapt(self, batches: Sequence[Mapping[str, Tensor]], epochs: int = 50, **train_kwargs) -> list[float]:
        """One tuning-time adaptation: reset online from target, train it, EMA-update the target.

        Args:
            batches: all records measured so far in this tuning run, as task-grouped batch dicts on
                this module's device (labels per task, `data.labels.normalized_throughput`).
            epochs: maximum training epochs of the online copy.
            train_kwargs: forwarded to `train_online` (lr, weight_decay, loss, clip, patience, seed).

        Returns:
            Mean training loss per epoch (see `train_online`). The online copy is in eval mode.
        """
        self.reset_online()
        history = train_online(self.online, batches, epochs=epochs, **train_kwargs)
        self.ema_update()
        return history

    @classmethod
    def from_pretrained(cls, net: CostNet, momentum: float = 0.99) -> MoANet:
        """Both copies from a trained PAMNet (its weights and normalization)."""
        if not isinstance(net, PAMNet):
            raise TypeError(f"MoANet.from_pretrained needs a PAMNet, got {type(net).__name__}")
        moa = cls(net.config, momentum).to(net.stmt_scale.device)
        moa.load_pretrained(net.state_dict())
        return moa.eval()
