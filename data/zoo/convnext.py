"""ConvNeXt-T (Liu et al. 2022): a CNN modernised toward the vision transformer.

Workload kinds the other CNNs lack: 7x7 depthwise convolutions, layer norm over the channels of a
feature map (channels-last permutes around it, as the reference implementation does), pointwise
"convolutions" as linear layers on (1, H, W, C) with GELU, a per-channel layer scale, and
non-overlapping patchify / downsampling convolutions (4x4 stride 4, 2x2 stride 2). No batch norm.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

__all__ = ["ConvNeXt", "ConvNeXtBlock", "LayerNorm2d"]


class LayerNorm2d(nn.LayerNorm):
    """Layer norm over the channels of a (1, C, H, W) map: permute to channels-last, normalise, permute back."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class ConvNeXtBlock(nn.Module):
    """7x7 depthwise conv, then channels-last layer norm, 4x linear expansion, GELU, linear back,
    layer scale (a learnable per-channel gamma) and the residual connection."""

    def __init__(self, dim: int, layer_scale: float = 1e-6):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.gamma = nn.Parameter(torch.full((dim,), layer_scale))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.dwconv(x).permute(0, 2, 3, 1)  # (1, H, W, C)
        y = self.gamma * self.mlp(self.norm(y))
        return x + y.permute(0, 3, 1, 2)


class ConvNeXt(nn.Module):
    """ConvNeXt (T by default): (1, 3, S, S) images -> (1, 1000) logits.

    Stem: 4x4 conv stride 4 + layer norm; between stages: layer norm + 2x2 conv stride 2; head:
    global average pool, layer norm, linear. S >= 32 (the stem and three downsamplings divide it by 32).
    """

    def __init__(
        self, depths: Sequence[int] = (3, 3, 9, 3), dims: Sequence[int] = (96, 192, 384, 768), num_classes: int = 1000
    ):
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(3, dims[0], 4, 4), LayerNorm2d(dims[0], eps=1e-6)]
        for i, (depth, dim) in enumerate(zip(depths, dims)):
            if i > 0:
                layers += [LayerNorm2d(dims[i - 1], eps=1e-6), nn.Conv2d(dims[i - 1], dim, 2, 2)]
            layers += [ConvNeXtBlock(dim) for _ in range(depth)]
        self.features = nn.Sequential(*layers)
        self.norm = nn.LayerNorm(dims[-1], eps=1e-6)
        self.fc = nn.Linear(dims[-1], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.norm(self.features(x).mean((-2, -1))))
