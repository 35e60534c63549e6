"""MobileNetV2: inverted residual blocks with depthwise convs and ReLU6."""
from typing import Optional, Sequence

import torch
import torch.nn as nn

from ...registry import MODELS
from .base import BaseBackbone, ConvBNAct, make_divisible, make_stem


class InvertedResidual(nn.Module):
    """1x1 expand -> 3x3 depthwise -> 1x1 linear projection, residual when shapes match.

    Args:
        in_channels: input channels.
        out_channels: output channels.
        stride: stride of the depthwise conv.
        expand_ratio: hidden width as a multiple of ``in_channels``; 1 skips the expansion.

    Example:
        >>> InvertedResidual(8, 8, 1, expand_ratio=6)(torch.randn(1, 8, 4, 4)).shape
        torch.Size([1, 8, 4, 4])
    """

    def __init__(self, in_channels: int, out_channels: int, stride: int, expand_ratio: int):
        super().__init__()
        hidden = int(round(in_channels * expand_ratio))
        layers = [] if expand_ratio == 1 else [ConvBNAct(in_channels, hidden, 1, act=nn.ReLU6)]
        layers += [ConvBNAct(hidden, hidden, 3, stride, groups=hidden, act=nn.ReLU6),
                   ConvBNAct(hidden, out_channels, 1, act=None)]
        self.conv = nn.Sequential(*layers)
        self.use_residual = stride == 1 and in_channels == out_channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv(x)
        return x + out if self.use_residual else out


# expand ratio, output channels, blocks, stride of the first block: one row per stage.
ARCH_SETTING = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                (6, 160, 3, 2), (6, 320, 1, 1))


@MODELS.register_module()
class MobileNetV2(BaseBackbone):
    """MobileNetV2 (Sandler et al., 2018): seven inverted residual stages and a 1x1 conv.

    The eight stages that ``out_indices`` counts are the seven rows of
    :data:`ARCH_SETTING` and the final 1x1 conv to 1280 channels.

    Args:
        widen_factor: width multiplier; every width is rounded with ``make_divisible(8)``
            and the final conv never gets narrower than 1280.
        in_channels: image channels.
        num_classes: add a pooled linear classifier with this many classes.
        stem: ``'imagenet'`` (stride-2 3x3 conv, 32x downsampling) or ``'cifar'``
            (stride-1 3x3 conv, 16x downsampling).
        out_indices: return the outputs of these stages (0-7) instead.

    Example:
        >>> net = MobileNetV2(widen_factor=0.5, num_classes=10)
        >>> net(torch.randn(2, 3, 32, 32)).shape
        torch.Size([2, 10])
    """

    def __init__(self, widen_factor: float = 1.0, in_channels: int = 3,
                 num_classes: Optional[int] = None, stem: str = 'imagenet',
                 out_indices: Optional[Sequence[int]] = None):
        channels = make_divisible(32 * widen_factor)
        stem_module = make_stem(in_channels, channels, stem, max_pool=False, act=nn.ReLU6)
        stages, stage_channels = [], []
        for expand_ratio, width, num_blocks, stride in ARCH_SETTING:
            out_channels = make_divisible(width * widen_factor)
            blocks = []
            for index in range(num_blocks):
                blocks.append(InvertedResidual(channels, out_channels,
                                               stride if index == 0 else 1, expand_ratio))
                channels = out_channels
            stages.append(nn.Sequential(*blocks))
            stage_channels.append(out_channels)
        last_channels = make_divisible(1280 * max(1.0, widen_factor))
        stages.append(ConvBNAct(channels, last_channels, 1, act=nn.ReLU6))
        stage_channels.append(last_channels)
        super().__init__(stem_module, stages, stage_channels, num_classes, out_indices)
        self.widen_factor = widen_factor
