"""Inception-v3 (Szegedy et al. 2016, torchvision's layout, 299 x 299 input).

Factorised 1x7 / 7x1 and 1x3 / 3x1 convolutions, unpadded stride-2 reductions and four-way
concatenations: convolution shapes no other zoo network has.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["InceptionV3"]


def _conv(cin: int, cout: int, kernel: int | tuple[int, int], stride: int = 1, padding: int | tuple[int, int] = 0):
    """torchvision's BasicConv2d: bias-free convolution, batch norm (eps 1e-3), ReLU."""
    return nn.Sequential(
        nn.Conv2d(cin, cout, kernel, stride, padding, bias=False), nn.BatchNorm2d(cout, eps=1e-3), nn.ReLU()
    )


def _avg_pool_branch(cin: int, cout: int) -> nn.Module:
    return nn.Sequential(nn.AvgPool2d(3, 1, 1), _conv(cin, cout, 1))


class _Branches(nn.Module):
    """Runs every branch on the same input and concatenates their outputs along channels."""

    def __init__(self, *branches: nn.Module):
        super().__init__()
        self.branches = nn.ModuleList(branches)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([b(x) for b in self.branches], dim=1)


def inception_a(cin: int, pool: int) -> nn.Module:
    """35 x 35 grid: 1x1, 5x5, double 3x3, pooled 1x1 -> 224 + pool channels."""
    return _Branches(
        _conv(cin, 64, 1),
        nn.Sequential(_conv(cin, 48, 1), _conv(48, 64, 5, padding=2)),
        nn.Sequential(_conv(cin, 64, 1), _conv(64, 96, 3, padding=1), _conv(96, 96, 3, padding=1)),
        _avg_pool_branch(cin, pool),
    )


def inception_b(cin: int) -> nn.Module:
    """35 -> 17 grid reduction."""
    return _Branches(
        _conv(cin, 384, 3, 2),
        nn.Sequential(_conv(cin, 64, 1), _conv(64, 96, 3, padding=1), _conv(96, 96, 3, 2)),
        nn.MaxPool2d(3, 2),
    )


def inception_c(cin: int, c7: int) -> nn.Module:
    """17 x 17 grid with factorised 7x7 convolutions -> 768 channels."""
    return _Branches(
        _conv(cin, 192, 1),
        nn.Sequential(_conv(cin, c7, 1), _conv(c7, c7, (1, 7), padding=(0, 3)), _conv(c7, 192, (7, 1), padding=(3, 0))),
        nn.Sequential(
            _conv(cin, c7, 1),
            _conv(c7, c7, (7, 1), padding=(3, 0)),
            _conv(c7, c7, (1, 7), padding=(0, 3)),
            _conv(c7, c7, (7, 1), padding=(3, 0)),
            _conv(c7, 192, (1, 7), padding=(0, 3)),
        ),
        _avg_pool_branch(cin, 192),
    )


def inception_d(cin: int) -> nn.Module:
    """17 -> 8 grid reduction."""
    return _Branches(
        nn.Sequential(_conv(cin, 192, 1), _conv(192, 320, 3, 2)),
        nn.Sequential(
            _conv(cin, 192, 1),
            _conv(192, 192, (1, 7), padding=(0, 3)),
            _conv(192, 192, (7, 1), padding=(3, 0)),
            _conv(192, 192, 3, 2),
        ),
        nn.MaxPool2d(3, 2),
    )


def _split_3x3(cin: int) -> nn.Module:
    """The 1x3 and 3x1 halves of Inception-E's expanded 3x3, side by side."""
    return _Branches(_conv(cin, 384, (1, 3), padding=(0, 1)), _conv(cin, 384, (3, 1), padding=(1, 0)))


def inception_e(cin: int) -> nn.Module:
    """8 x 8 grid with expanded filter banks -> 2048 channels."""
    return _Branches(
        _conv(cin, 320, 1),
        nn.Sequential(_conv(cin, 384, 1), _split_3x3(384)),
        nn.Sequential(_conv(cin, 448, 1), _conv(448, 384, 3, padding=1), _split_3x3(384)),
        _avg_pool_branch(cin, 192),
    )


class InceptionV3(nn.Module):
    """Inception-v3 without the auxiliary classifier: (1, 3, S, S) images (S >= 75) -> (1, 1000) logits."""

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        self.features = nn.Sequential(
            _conv(3, 32, 3, 2),
            _conv(32, 32, 3),
            _conv(32, 64, 3, padding=1),
            nn.MaxPool2d(3, 2),
            _conv(64, 80, 1),
            _conv(80, 192, 3),
            nn.MaxPool2d(3, 2),
            inception_a(192, 32),
            inception_a(256, 64),
            inception_a(288, 64),
            inception_b(288),
            inception_c(768, 128),
            inception_c(768, 160),
            inception_c(768, 160),
            inception_c(768, 192),
            inception_d(768),
            inception_e(1280),
            inception_e(2048),
        )
        self.fc = nn.Linear(2048, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))
