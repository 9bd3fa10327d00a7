"""DeepLabV3 (Chen et al. 2017) for semantic segmentation: dilated ResNet-50 backbone + ASPP head.

The backbone keeps output stride 8 by dilating its last two stages (atrous 3x3 convolutions at rates
2 and 4), the ASPP head adds rates 12/24/36 and an image-pooling branch, and the logits are
upsampled bilinearly to the input size: dilated convolutions and resizes are workloads the
classification networks lack.
"""

from __future__ import annotations

import torch
from torch import nn

from data.zoo.common import conv_bn
from data.zoo.resnet import Bottleneck, ResNet

__all__ = ["DeepLabV3"]


class ASPP(nn.Module):
    """Atrous spatial pyramid pooling: 1x1, three dilated 3x3 and an image-pooling branch -> 256 channels."""

    def __init__(self, cin: int, rates: tuple[int, ...] = (12, 24, 36), cout: int = 256):
        super().__init__()
        self.branches = nn.ModuleList(
            [nn.Sequential(*conv_bn(cin, cout, 1), nn.ReLU())]
            + [nn.Sequential(*conv_bn(cin, cout, 3, dilation=r), nn.ReLU()) for r in rates]
        )
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), *conv_bn(cin, cout, 1), nn.ReLU())
        self.project = nn.Sequential(*conv_bn(cout * (len(rates) + 2), cout, 1), nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pooled = nn.functional.interpolate(self.pool(x), size=x.shape[-2:], mode="bilinear", align_corners=False)
        return self.project(torch.cat([b(x) for b in self.branches] + [pooled], dim=1))


class DeepLabV3(nn.Module):
    """DeepLabV3-ResNet50: (1, 3, S, S) images -> (1, classes, S, S) per-pixel logits (21 VOC classes)."""

    def __init__(self, num_classes: int = 21, layers: tuple[int, ...] = (3, 4, 6, 3)):
        super().__init__()
        self.backbone = ResNet(Bottleneck, layers, num_classes=None, dilate=(False, True, True))
        self.head = nn.Sequential(
            ASPP(self.backbone.out_channels), *conv_bn(256, 256, 3), nn.ReLU(), nn.Conv2d(256, num_classes, 1)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.head(self.backbone(x))
        return nn.functional.interpolate(logits, size=x.shape[-2:], mode="bilinear", align_corners=False)
