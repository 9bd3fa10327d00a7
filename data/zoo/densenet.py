"""DenseNet-121 (Huang et al. 2017): every layer's output is concatenated to all later inputs.

Its pre-activation order (batch norm and ReLU before each convolution) and the growing channel
counts give fused kernels that ResNet's conv-bn-relu order does not.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["DenseNet"]


class DenseLayer(nn.Module):
    """BN-ReLU-1x1 conv (to bn_size x growth) then BN-ReLU-3x3 conv (to growth); output is concatenated."""

    def __init__(self, cin: int, growth: int, bn_size: int):
        super().__init__()
        mid = bn_size * growth
        self.body = nn.Sequential(
            nn.BatchNorm2d(cin),
            nn.ReLU(),
            nn.Conv2d(cin, mid, 1, bias=False),
            nn.BatchNorm2d(mid),
            nn.ReLU(),
            nn.Conv2d(mid, growth, 3, padding=1, bias=False),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, self.body(x)], dim=1)


class DenseNet(nn.Module):
    """DenseNet-BC: (1, 3, S, S) images -> (1, 1000) logits; DenseNet-121 by default."""

    def __init__(
        self,
        blocks: tuple[int, ...] = (6, 12, 24, 16),
        growth: int = 32,
        init_features: int = 64,
        bn_size: int = 4,
        num_classes: int = 1000,
    ):
        super().__init__()
        layers: list[nn.Module] = [
            nn.Conv2d(3, init_features, 7, 2, 3, bias=False),
            nn.BatchNorm2d(init_features),
            nn.ReLU(),
            nn.MaxPool2d(3, 2, 1),
        ]
        c = init_features
        for i, n in enumerate(blocks):
            for _ in range(n):
                layers.append(DenseLayer(c, growth, bn_size))
                c += growth
            if i != len(blocks) - 1:  # transition: halve channels and resolution
                layers += [nn.BatchNorm2d(c), nn.ReLU(), nn.Conv2d(c, c // 2, 1, bias=False), nn.AvgPool2d(2, 2)]
                c //= 2
        layers += [nn.BatchNorm2d(c), nn.ReLU()]
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(c, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))
