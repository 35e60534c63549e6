"""SPOS's ShuffleNetV2 choice blocks: ShuffleBlock (3x3, 5x5, 7x7), ShuffleXception, and
DynamicShuffleBlock (a ShuffleBlock whose hidden width is searched)."""
from typing import List, Optional, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...models.backbones import ConvBNAct, channel_shuffle
from ...registry import MODELS
from ..checks import integer
from ..mutables import OneShotMutableChannel
from .sliced import copy_bn, copy_bn_settings, sliced_bn


def _branch_widths(in_channels: int, out_channels: int, stride: int) -> List[int]:
    """(input, output) channels of the main branch; the rest of the output is the input
    (stride 1, half of it passes through) or its projection (stride 2)."""
    if stride not in (1, 2):
        raise ValueError(f'a shuffle block has stride 1 or 2, got {stride}')
    if stride == 1:
        if in_channels != out_channels or in_channels % 2:
            raise ValueError('a stride-1 shuffle block keeps an even width: in_channels '
                             f'{in_channels}, out_channels {out_channels}')
        return [in_channels // 2, in_channels // 2]
    if out_channels <= in_channels:
        raise ValueError(f'a stride-2 shuffle block widens: out_channels {out_channels} must '
                         f'exceed in_channels {in_channels}')
    return [in_channels, out_channels - in_channels]


class _ShuffleBase(nn.Module):
    """Split (stride 1) or project (stride 2), run ``main``, concatenate and shuffle."""

    def __init__(self, in_channels: int, out_channels: int, stride: int, kernel_size: int):
        super().__init__()
        owner = type(self).__name__
        for key, value in (('in_channels', in_channels), ('out_channels', out_channels),
                           ('stride', stride), ('kernel_size', kernel_size)):
            integer(value, owner, key, minimum=1)
        self.stride = stride
        if stride == 2:
            self.proj = nn.Sequential(
                ConvBNAct(in_channels, in_channels, kernel_size, 2, groups=in_channels,
                          act=None),
                ConvBNAct(in_channels, in_channels, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride == 1:
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat((x1, self.branch(x2)), dim=1)
        else:
            out = torch.cat((self.proj(x), self.branch(x)), dim=1)
        return channel_shuffle(out, 2)

    def branch(self, x: torch.Tensor) -> torch.Tensor:
        """The main branch (a dynamic block runs a slice of it)."""
        return self.main(x)


@MODELS.register_module()
class ShuffleBlock(_ShuffleBase):
    """SPOS's ShuffleNetV2 block with a ``kernel_size`` depthwise conv (Guo et al., 2020).

    Args:
        in_channels: input channels (even at stride 1).
        out_channels: output channels: equal to ``in_channels`` at stride 1, larger at
            stride 2.
        stride: 1 or 2.
        kernel_size: the depthwise kernel: 3, 5 or 7 in SPOS.
        mid_channels: the main branch's hidden width; default its output width.

    Example:
        >>> ShuffleBlock(8, 16, stride=2, kernel_size=5)(torch.randn(1, 8, 8, 8)).shape
        torch.Size([1, 16, 4, 4])
    """

    def __init__(self, in_channels: int, out_channels: int, stride: int, kernel_size: int = 3,
                 mid_channels: Optional[int] = None):
        if mid_channels is not None:
            integer(mid_channels, type(self).__name__, 'mid_channels', minimum=1)
        super().__init__(in_channels, out_channels, stride, kernel_size)
        main_in, main_out = _branch_widths(in_channels, out_channels, stride)
        mid = main_out if mid_channels is None else mid_channels
        self.main = nn.Sequential(
            ConvBNAct(main_in, mid, 1),
            ConvBNAct(mid, mid, kernel_size, stride, groups=mid, act=None),
            ConvBNAct(mid, main_out, 1))


@MODELS.register_module()
class ShuffleXception(_ShuffleBase):
    """SPOS's Xception-like choice block: three depthwise 3x3 + pointwise pairs.

    Args:
        in_channels: input channels (even at stride 1).
        out_channels: output channels.
        stride: 1 or 2; the first depthwise conv strides.

    Example:
        >>> ShuffleXception(8, 8, stride=1)(torch.randn(1, 8, 4, 4)).shape
        torch.Size([1, 8, 4, 4])
    """

    def __init__(self, in_channels: int, out_channels: int, stride: int):
        super().__init__(in_channels, out_channels, stride, 3)
        main_in, main_out = _branch_widths(in_channels, out_channels, stride)
        layers, channels = [], main_in
        for index in range(3):
            layers += [ConvBNAct(channels, channels, 3, stride if index == 0 else 1,
                                 groups=channels, act=None),
                       ConvBNAct(channels, main_out, 1)]
            channels = main_out
        self.main = nn.Sequential(*layers)


@MODELS.register_module()
class DynamicShuffleBlock(ShuffleBlock):
    """A :class:`ShuffleBlock` whose main branch's hidden width is searched: SPOS's
    channel search, and a width that nests inside a chosen op.

    It holds the weights of ``mid_channels`` hidden channels; its ``width`` (an
    :class:`~razorlib.nas.OneShotMutableChannel`) selects the first of them: the 1x1
    conv's outputs, the depthwise conv, the last 1x1 conv's inputs, with their batch
    norms.  :meth:`to_static` is the plain ``ShuffleBlock`` of the current width with
    those weights, which is what a fixed subnet holds.

    Args:
        in_channels: input channels (even at stride 1).
        out_channels: output channels.
        stride: 1 or 2.
        kernel_size: the depthwise kernel.
        mid_ratios: the width choices, as ratios of ``mid_channels``.
        mid_channels: the widest hidden width; default the main branch's output width.

    Example:
        >>> block = DynamicShuffleBlock(8, 8, 1, mid_ratios=(0.5, 1.0)).eval()
        >>> block.width.current_choice = 0.5
        >>> x = torch.randn(1, 8, 5, 5)
        >>> static = block.to_static().eval()
        >>> static.main[0].conv.out_channels, torch.allclose(block(x), static(x), atol=1e-6)
        (2, True)
    """

    def __init__(self, in_channels: int, out_channels: int, stride: int, kernel_size: int = 3,
                 mid_ratios: Sequence[float] = (0.5, 0.75, 1.0),
                 mid_channels: Optional[int] = None):
        super().__init__(in_channels, out_channels, stride, kernel_size, mid_channels)
        self.in_channels, self.out_channels, self.kernel_size = \
            in_channels, out_channels, kernel_size
        widest = self.main[0].conv.out_channels
        self.width = OneShotMutableChannel(widest, mid_ratios)

    def branch(self, x: torch.Tensor) -> torch.Tensor:
        """The main branch on its first ``width.current_channels`` hidden channels."""
        mid = self.width.current_channels
        expand, depthwise, project = self.main
        out = F.conv2d(x, expand.conv.weight[:mid])
        out = expand.act(sliced_bn(out, expand.bn, mid))
        out = F.conv2d(out, depthwise.conv.weight[:mid], None, self.stride,
                       self.kernel_size // 2, 1, mid)
        out = sliced_bn(out, depthwise.bn, mid)
        out = F.conv2d(out, project.conv.weight[:, :mid])
        return project.act(sliced_bn(out, project.bn, project.bn.num_features))

    def to_static(self) -> ShuffleBlock:
        """The plain block of the current width, weights copied."""
        mid = self.width.current_channels
        block = ShuffleBlock(self.in_channels, self.out_channels, self.stride,
                             self.kernel_size, mid).to(self.main[2].conv.weight)  # dtype, device
        if self.stride == 2:
            block.proj.load_state_dict(self.proj.state_dict())
            copy_bn_settings(self.proj, block.proj)
        with torch.no_grad():
            block.main[0].conv.weight.copy_(self.main[0].conv.weight[:mid])
            block.main[1].conv.weight.copy_(self.main[1].conv.weight[:mid])
            block.main[2].conv.weight.copy_(self.main[2].conv.weight[:, :mid])
        for source, target in zip(self.main, block.main):
            copy_bn(source.bn, target.bn)
        return block.train(self.training)
