"""Shared pieces of the zoo's networks: the `Network` entry, conv + batch-norm, example inputs."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch
from torch import nn

__all__ = ["Network", "conv_bn", "image", "tokens"]


def conv_bn(
    cin: int, cout: int, kernel: int | tuple[int, int], stride: int = 1, groups: int = 1, dilation: int = 1
) -> list[nn.Module]:
    """A bias-free convolution with "same" padding (for odd kernels) followed by batch norm.

    Args:
        kernel: square side, or (height, width) for Inception's 1x7 / 7x1 factorised convolutions.
        dilation: atrous rate (DeepLabV3); the padding grows with it so the stride alone sets the output size.
    """
    kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
    padding = (dilation * (kh // 2), dilation * (kw // 2))
    conv = nn.Conv2d(cin, cout, kernel, stride, padding, dilation=dilation, groups=groups, bias=False)
    return [conv, nn.BatchNorm2d(cout)]


@dataclasses.dataclass(frozen=True)
class Network:
    """A zoo entry: how to build the torch module and its example input for a given input size.

    `size` is the image side for vision networks and the sequence length for text ones; the default
    is the standard one, tests pass a smaller one to keep extraction fast. `min_size` is the
    smallest size the architecture accepts (Inception-v3's stem needs 75 px).
    """

    build: Callable[[], nn.Module]
    example: Callable[[int], torch.Tensor]
    default_size: int
    min_size: int = 1
    max_size: int | None = None


def image(size: int) -> torch.Tensor:
    """(1, 3, size, size) float32 image batch."""
    return torch.randn(1, 3, size, size)


def tokens(size: int) -> torch.Tensor:
    """(1, size) int64 token ids."""
    return torch.randint(0, 1000, (1, size), dtype=torch.int64)
