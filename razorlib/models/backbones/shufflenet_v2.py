"""ShuffleNetV2: channel split, two branches, concat and channel shuffle."""
from typing import Optional, Sequence

import torch
import torch.nn as nn

from ...registry import MODELS
from .base import BaseBackbone, ConvBNAct, make_stem


def channel_shuffle(x: torch.Tensor, groups: int) -> torch.Tensor:
    """Interleave the channels of ``groups`` equal groups; sizes come from ``x.size()``.

    Args:
        x: an NCHW tensor whose channel count divides by ``groups``.
        groups: number of groups to interleave.

    Returns:
        The tensor with channel ``g * (C // groups) + i`` moved to ``i * groups + g``.

    Example:
        >>> channel_shuffle(torch.arange(4.).view(1, 4, 1, 1), 2).flatten().tolist()
        [0.0, 2.0, 1.0, 3.0]
    """
    b, c, h, w = x.size()
    return x.view(b, groups, c // groups, h, w).transpose(1, 2).contiguous().view(b, c, h, w)


class ShuffleUnit(nn.Module):
    """ShuffleNetV2 unit: at stride 1 half the channels pass through untouched; at stride
    2 both branches see all of the input and the channels double.

    Args:
        in_channels: input channels.
        out_channels: output channels; each branch gives half.
        stride: 1 (split unit) or 2 (downsampling unit).

    Example:
        >>> ShuffleUnit(8, 16, stride=2)(torch.randn(1, 8, 8, 8)).shape
        torch.Size([1, 16, 4, 4])
    """

    def __init__(self, in_channels: int, out_channels: int, stride: int):
        super().__init__()
        if stride == 1 and in_channels != out_channels:
            raise ValueError('a stride-1 ShuffleUnit keeps its width: in_channels '
                             f'{in_channels} != out_channels {out_channels}')
        branch = out_channels // 2
        self.stride = stride
        if stride > 1:
            self.branch1 = nn.Sequential(
                ConvBNAct(in_channels, in_channels, 3, stride, groups=in_channels, act=None),
                ConvBNAct(in_channels, branch, 1))
        self.branch2 = nn.Sequential(
            ConvBNAct(in_channels if stride > 1 else branch, branch, 1),
            ConvBNAct(branch, branch, 3, stride, groups=branch, act=None),
            ConvBNAct(branch, branch, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride == 1:
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat((x1, self.branch2(x2)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        return channel_shuffle(out, 2)


# widen factor -> output channels of the stem, the three stages and the final conv.
STAGE_CHANNELS = {
    0.5: (24, 48, 96, 192, 1024),
    1.0: (24, 116, 232, 464, 1024),
    1.5: (24, 176, 352, 704, 1024),
    2.0: (24, 244, 488, 976, 2048),
}
STAGE_BLOCKS = (4, 8, 4)


@MODELS.register_module()
class ShuffleNetV2(BaseBackbone):
    """ShuffleNetV2 (Ma et al., 2018): three stages of shuffle units and a 1x1 conv.

    The four stages that ``out_indices`` counts are the three unit stages and the final
    1x1 conv.

    Args:
        widen_factor: one of 0.5, 1.0, 1.5, 2.0 (the published widths).
        in_channels: image channels.
        num_classes: add a pooled linear classifier with this many classes.
        stem: ``'imagenet'`` (stride-2 3x3 conv + max pool, 32x downsampling) or
            ``'cifar'`` (stride-1 3x3 conv, no pooling, 8x downsampling).
        out_indices: return the outputs of these stages (0-3) instead.

    Example:
        >>> net = ShuffleNetV2(widen_factor=0.5, stem='cifar', num_classes=10)
        >>> net(torch.randn(2, 3, 16, 16)).shape
        torch.Size([2, 10])
    """

    def __init__(self, widen_factor: float = 1.0, in_channels: int = 3,
                 num_classes: Optional[int] = None, stem: str = 'imagenet',
                 out_indices: Optional[Sequence[int]] = None):
        if widen_factor not in STAGE_CHANNELS:
            raise ValueError(f'ShuffleNetV2 widen_factor must be one of '
                             f'{sorted(STAGE_CHANNELS)}, got {widen_factor}')
        stem_channels, *widths, last_channels = STAGE_CHANNELS[widen_factor]
        stem_module = make_stem(in_channels, stem_channels, stem)
        stages, channels = [], stem_channels
        for width, num_blocks in zip(widths, STAGE_BLOCKS):
            stages.append(nn.Sequential(ShuffleUnit(channels, width, 2),
                                        *(ShuffleUnit(width, width, 1)
                                          for _ in range(num_blocks - 1))))
            channels = width
        stages.append(ConvBNAct(channels, last_channels, 1))
        super().__init__(stem_module, stages, [*widths, last_channels], num_classes,
                         out_indices)
        self.widen_factor = widen_factor
