"""MBConv networks with squeeze-and-excitation: EfficientNet-B0 (Tan & Le 2019) and MobileNetV3-Large
(Howard et al. 2019).

Both stack MobileNetV2's inverted residual with a squeeze-and-excitation (Hu et al. 2018) after the
depthwise convolution (MnasNet's MBConv), so one block serves both, and MobileNetV2 too (without
SE: `data.zoo.mobilenet.inverted_residual`). Workload kinds MobileNetV2 lacks:
5x5 depthwise convolutions, SE's global pool + 1x1 convolutions on a 1x1 map + sigmoid / hard-sigmoid
gate, and SiLU / hardswish activations. Layouts and channel counts follow torchvision (width 1.0).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from data.zoo.common import conv_bn

__all__ = ["EfficientNet", "MBConv", "MobileNetV3", "SqueezeExcite", "make_divisible"]

Activation = Callable[[], nn.Module]


class SqueezeExcite(nn.Module):
    """Channel attention: global average pool, 1x1 reduce + `act`, 1x1 expand + `gate`, scale the input."""

    def __init__(self, channels: int, squeezed: int, act: Activation, gate: Activation):
        super().__init__()
        self.fc = nn.Sequential(nn.Conv2d(channels, squeezed, 1), act(), nn.Conv2d(squeezed, channels, 1), gate())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.fc(nn.functional.adaptive_avg_pool2d(x, 1))


class MBConv(nn.Module):
    """1x1 expand (skipped when `hidden == cin`), kxk depthwise, optional SE, 1x1 linear projection (+ residual)."""

    def __init__(
        self, cin: int, hidden: int, cout: int, kernel: int, stride: int, act: Activation, se: nn.Module | None
    ):
        super().__init__()
        layers = [*conv_bn(cin, hidden, 1), act()] if hidden != cin else []
        layers += [*conv_bn(hidden, hidden, kernel, stride, groups=hidden), act()]
        layers += [se] if se is not None else []
        self.body = nn.Sequential(*layers, *conv_bn(hidden, cout, 1))
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x) if self.residual else self.body(x)


def make_divisible(value: float, divisor: int = 8) -> int:
    """torchvision's `_make_divisible`: the nearest multiple of `divisor`, not below 90% of `value`."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


class EfficientNet(nn.Module):
    """EfficientNet (B0 by default): (1, 3, S, S) images -> (1, 1000) logits; SiLU, SE ratio 0.25."""

    CONFIG = (
        (1, 3, 1, 16, 1),
        (6, 3, 2, 24, 2),
        (6, 5, 2, 40, 2),
        (6, 3, 2, 80, 3),
        (6, 5, 1, 112, 3),
        (6, 5, 2, 192, 4),
        (6, 3, 1, 320, 1),
    )
    """(expansion, kernel, first stride, channels, repeats) per stage, the B0 table of the paper."""

    def __init__(
        self, config: Sequence[tuple[int, int, int, int, int]] = CONFIG, head: int = 1280, num_classes: int = 1000
    ):
        super().__init__()
        layers: list[nn.Module] = [*conv_bn(3, 32, 3, 2), nn.SiLU()]
        cin = 32
        for expand, kernel, stride, cout, repeats in config:
            for j in range(repeats):
                # SE squeezes to a quarter of the block's input channels (not of the expanded ones)
                se = SqueezeExcite(cin * expand, max(1, cin // 4), nn.SiLU, nn.Sigmoid)
                layers.append(MBConv(cin, cin * expand, cout, kernel, stride if j == 0 else 1, nn.SiLU, se))
                cin = cout
        layers += [*conv_bn(cin, head, 1), nn.SiLU()]
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(head, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))


class MobileNetV3(nn.Module):
    """MobileNetV3 (Large by default): (1, 3, S, S) images -> (1, 1000) logits.

    Hardswish ("HS") or ReLU ("RE") per block; SE (ReLU, hard-sigmoid gate) squeezes the expanded
    channels to a quarter, rounded to a multiple of 8; head: 1x1 conv to 6 x the last channels, pool,
    linear to `head`, hardswish, linear to the classes.
    """

    CONFIG = (
        (3, 16, 16, False, "RE", 1),
        (3, 64, 24, False, "RE", 2),
        (3, 72, 24, False, "RE", 1),
        (5, 72, 40, True, "RE", 2),
        (5, 120, 40, True, "RE", 1),
        (5, 120, 40, True, "RE", 1),
        (3, 240, 80, False, "HS", 2),
        (3, 200, 80, False, "HS", 1),
        (3, 184, 80, False, "HS", 1),
        (3, 184, 80, False, "HS", 1),
        (3, 480, 112, True, "HS", 1),
        (3, 672, 112, True, "HS", 1),
        (5, 672, 160, True, "HS", 2),
        (5, 960, 160, True, "HS", 1),
        (5, 960, 160, True, "HS", 1),
    )
    """(kernel, expanded channels, output channels, SE, activation, stride) per bneck, the paper's Table 1."""

    def __init__(
        self, config: Sequence[tuple[int, int, int, bool, str, int]] = CONFIG, head: int = 1280, num_classes: int = 1000
    ):
        super().__init__()
        acts = {"RE": nn.ReLU, "HS": nn.Hardswish}
        layers: list[nn.Module] = [*conv_bn(3, 16, 3, 2), nn.Hardswish()]
        cin = 16
        for kernel, hidden, cout, use_se, act, stride in config:
            se = SqueezeExcite(hidden, make_divisible(hidden // 4), nn.ReLU, nn.Hardsigmoid) if use_se else None
            layers.append(MBConv(cin, hidden, cout, kernel, stride, acts[act], se))
            cin = cout
        layers += [*conv_bn(cin, 6 * cin, 1), nn.Hardswish()]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Linear(6 * cin, head), nn.Hardswish(), nn.Linear(head, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))
