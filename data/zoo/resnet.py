"""Residual CNNs: ResNet-18/50 (He et al. 2016, torchvision v1.5 layout), ResNeXt-50 32x4d and
Wide ResNet-50-2 (Zagoruyko & Komodakis 2016).

ResNeXt differs from ResNet-50 only in the bottleneck's 3x3 convolution, which is grouped (32
groups) and twice as wide: grouped convolutions are a workload kind ResNet lacks. Wide ResNet-50-2
doubles the bottleneck's inner width (base_width 128) without grouping.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from data.zoo.common import conv_bn

__all__ = ["BasicBlock", "Bottleneck", "ResNet"]


class BasicBlock(nn.Module):
    """ResNet-18/34 block: two 3x3 convolutions and a residual connection."""

    expansion = 1

    def __init__(self, cin: int, planes: int, stride: int, groups: int = 1, base_width: int = 64, dilation: int = 1):
        super().__init__()
        cout = planes * self.expansion
        self.body = nn.Sequential(*conv_bn(cin, planes, 3, stride), nn.ReLU(), *conv_bn(planes, cout, 3))
        self.down = nn.Sequential(*conv_bn(cin, cout, 1, stride)) if stride != 1 or cin != cout else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.down(x))


class Bottleneck(BasicBlock):
    """ResNet-50 / ResNeXt block: 1x1 reduce, 3x3 (grouped for ResNeXt, dilated for DeepLab), 1x1 expand.

    The stride sits on the 3x3, as in torchvision v1.5; the 3x3 has `planes * base_width / 64 * groups`
    channels (ResNet-50: planes; ResNeXt-50 32x4d: 2 x planes in 32 groups; Wide ResNet-50-2: 2 x planes).
    """

    expansion = 4

    def __init__(self, cin: int, planes: int, stride: int, groups: int = 1, base_width: int = 64, dilation: int = 1):
        super().__init__(cin, planes, stride)
        width = planes * base_width // 64 * groups
        cout = planes * self.expansion
        self.body = nn.Sequential(
            *conv_bn(cin, width, 1),
            nn.ReLU(),
            *conv_bn(width, width, 3, stride, groups=groups, dilation=dilation),
            nn.ReLU(),
            *conv_bn(width, cout, 1),
        )


class ResNet(nn.Module):
    """ImageNet ResNet / ResNeXt: (1, 3, S, S) images -> (1, 1000) logits.

    Args:
        dilate: per stage after the first, replace its stride by dilation (DeepLabV3's backbone with
            output stride 8 dilates the last two stages).
        num_classes: None keeps only the feature extractor (`forward` then returns (1, C, S/k, S/k)).
    """

    def __init__(
        self,
        block: type[BasicBlock],
        layers: Sequence[int],
        num_classes: int | None = 1000,
        groups: int = 1,
        base_width: int = 64,
        dilate: Sequence[bool] = (False, False, False),
    ):
        super().__init__()
        stages: list[nn.Module] = [*conv_bn(3, 64, 7, 2), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
        cin, dilation = 64, 1
        for i, n in enumerate(layers):
            planes, stride, first_dilation = 64 * 2**i, 2 if i > 0 else 1, dilation
            if i > 0 and dilate[i - 1]:
                dilation, stride = dilation * stride, 1
            for j in range(n):
                stages.append(
                    block(
                        cin,
                        planes,
                        stride if j == 0 else 1,
                        groups=groups,
                        base_width=base_width,
                        dilation=first_dilation if j == 0 else dilation,
                    )
                )
                cin = planes * block.expansion
        self.features = nn.Sequential(*stages)
        self.out_channels = cin
        self.fc = nn.Linear(cin, num_classes) if num_classes else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        if self.fc is None:
            return x
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))
