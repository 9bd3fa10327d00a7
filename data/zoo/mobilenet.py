"""MobileNetV2 (Sandler et al. 2018, width 1.0): depthwise-separable convolutions with inverted residuals."""

from __future__ import annotations

import torch
from torch import nn

from data.zoo.common import conv_bn
from data.zoo.mbconv import MBConv

__all__ = ["MobileNetV2", "inverted_residual"]


def inverted_residual(cin: int, cout: int, stride: int, expand: int) -> MBConv:
    """MobileNetV2 block: 1x1 expand, 3x3 depthwise, 1x1 linear projection (+ residual), ReLU6, no
    squeeze-and-excitation: the MBConv of `data.zoo.mbconv` (the same layers in the same order)."""
    return MBConv(cin, cin * expand, cout, 3, stride, nn.ReLU6, None)


class MobileNetV2(nn.Module):
    """MobileNetV2: (1, 3, S, S) images -> (1, 1000) logits."""

    CONFIG = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))
    """(expansion t, channels c, repeats n, first stride s) per stage, from the paper's Table 2."""

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        layers: list[nn.Module] = [*conv_bn(3, 32, 3, 2), nn.ReLU6()]
        cin = 32
        for t, c, n, s in self.CONFIG:
            for j in range(n):
                layers.append(inverted_residual(cin, c, s if j == 0 else 1, t))
                cin = c
        layers += [*conv_bn(cin, 1280, 1), nn.ReLU6()]
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(1280, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))
