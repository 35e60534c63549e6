"""MBConvBlock and DynamicMBConv: an inverted residual block, fixed or searchable."""
from typing import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...models.backbones import ConvBNAct
from ...registry import MODELS
from ..checks import integer, integers, whole_number
from ..mutables import OneShotMutableValue
from .sliced import copy_bn, sliced_bn


def _block_ints(owner: str, in_channels, out_channels, stride, **more) -> list:
    """A block's channel counts, stride (and ``more``) checked as positive integers."""
    named = dict(in_channels=in_channels, out_channels=out_channels, stride=stride, **more)
    return [integer(value, owner, key, minimum=1) for key, value in named.items()]


def check_expand_ratios(expand_ratios, owner: str) -> None:
    """Expand ratios are whole numbers >= 1, an int or a float (``6.0``); the hidden
    width is ``in_channels`` times the ratio."""
    if isinstance(expand_ratios, (str, bytes)) or not isinstance(expand_ratios, Sequence) \
            or not expand_ratios:
        raise ValueError(f'{owner}: expand_ratios must be a non-empty list of numbers, '
                         f'got {expand_ratios!r}')
    for index, ratio in enumerate(expand_ratios):
        whole_number(ratio, owner, f'expand_ratios[{index}]')


@MODELS.register_module()
class MBConvBlock(nn.Module):
    """1x1 expand -> ``kernel_size`` depthwise -> 1x1 project; residual when shapes match.

    The plain block a :class:`DynamicMBConv` becomes in a fixed subnet.

    Args:
        in_channels: input channels.
        out_channels: output channels.
        stride: stride of the depthwise conv.
        kernel_size: depthwise kernel size.
        expand_ratio: hidden width as a multiple of ``in_channels``.
        act: activation class.

    Example:
        >>> MBConvBlock(8, 8, 1, kernel_size=5, expand_ratio=3)(torch.randn(1, 8, 6, 6)).shape
        torch.Size([1, 8, 6, 6])
    """

    def __init__(self, in_channels: int, out_channels: int, stride: int, kernel_size: int = 3,
                 expand_ratio: int = 6, act: type = nn.ReLU6):
        super().__init__()
        in_channels, out_channels, stride, kernel_size = _block_ints(
            'MBConvBlock', in_channels, out_channels, stride, kernel_size=kernel_size)
        hidden = in_channels * int(whole_number(expand_ratio, 'MBConvBlock', 'expand_ratio'))
        self.expand = ConvBNAct(in_channels, hidden, 1, act=act)
        self.depthwise = ConvBNAct(hidden, hidden, kernel_size, stride, groups=hidden, act=act)
        self.project = ConvBNAct(hidden, out_channels, 1, act=None)
        self.use_residual = stride == 1 and in_channels == out_channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.project(self.depthwise(self.expand(x)))
        return x + out if self.use_residual else out


@MODELS.register_module()
class DynamicMBConv(nn.Module):
    """An MBConv block whose kernel size and expand ratio are searchable values.

    It holds the weights of the largest kernel and ratio; a smaller kernel uses the
    centre of the largest one, a smaller ratio the first hidden channels (weight
    sharing as in OFA / BigNAS).  :meth:`to_static` returns the :class:`MBConvBlock` of
    the current values with those weights, which is what a fixed subnet holds.

    Args:
        in_channels: input channels.
        out_channels: output channels.
        stride: stride of the depthwise conv.
        kernel_sizes: the kernel size choices (odd integers; ``5.0`` is refused).
        expand_ratios: the expand ratio choices (whole numbers >= 1, ``6`` or ``6.0``).
        act: activation class.

    Example:
        >>> block = DynamicMBConv(8, 8, 1, kernel_sizes=(3, 5), expand_ratios=(3, 6)).eval()
        >>> block.kernel_size.current_choice, block.expand_ratio.current_choice = 3, 3
        >>> x = torch.randn(1, 8, 6, 6)
        >>> torch.allclose(block(x), block.to_static().eval()(x), atol=1e-6)
        True
    """

    def __init__(self, in_channels: int, out_channels: int, stride: int,
                 kernel_sizes: Sequence[int] = (3, 5, 7), expand_ratios: Sequence[int] = (3, 6),
                 act: type = nn.ReLU6):
        super().__init__()
        in_channels, out_channels, stride = _block_ints('DynamicMBConv', in_channels,
                                                        out_channels, stride)
        kernel_sizes = integers(kernel_sizes, 'DynamicMBConv', 'kernel_sizes', minimum=1)
        if any(k % 2 == 0 for k in kernel_sizes):
            raise ValueError(f'DynamicMBConv kernel sizes must be odd, got {kernel_sizes}')
        check_expand_ratios(expand_ratios, 'DynamicMBConv')
        self.kernel_size = OneShotMutableValue(kernel_sizes, integer=True)
        self.expand_ratio = OneShotMutableValue(expand_ratios)
        self.in_channels, self.out_channels, self.stride = in_channels, out_channels, stride
        self.act_type = act
        hidden = in_channels * int(self.expand_ratio.max_choice)  # 6.0 is allowed
        kernel = self.kernel_size.max_choice
        self.expand = ConvBNAct(in_channels, hidden, 1, act=act)
        self.depthwise = ConvBNAct(hidden, hidden, kernel, stride, groups=hidden, act=act)
        self.project = ConvBNAct(hidden, out_channels, 1, act=None)
        self.use_residual = stride == 1 and in_channels == out_channels

    def _depthwise_weight(self, hidden: int, kernel: int) -> torch.Tensor:
        start = (self.kernel_size.max_choice - kernel) // 2
        return self.depthwise.conv.weight[:hidden, :, start:start + kernel,
                                          start:start + kernel]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.in_channels * int(self.expand_ratio.current_choice)
        kernel = int(self.kernel_size.current_choice)
        out = F.conv2d(x, self.expand.conv.weight[:hidden])
        out = self.expand.act(sliced_bn(out, self.expand.bn, hidden))
        out = F.conv2d(out, self._depthwise_weight(hidden, kernel), None, self.stride,
                       kernel // 2, 1, hidden)
        out = self.depthwise.act(sliced_bn(out, self.depthwise.bn, hidden))
        out = F.conv2d(out, self.project.conv.weight[:, :hidden])
        out = sliced_bn(out, self.project.bn, self.out_channels)
        return x + out if self.use_residual else out

    def to_static(self) -> MBConvBlock:
        """The plain block of the current kernel size and expand ratio, weights copied."""
        kernel, ratio = int(self.kernel_size.current_choice), int(self.expand_ratio.current_choice)
        block = MBConvBlock(self.in_channels, self.out_channels, self.stride, kernel, ratio,
                            self.act_type).to(self.project.conv.weight)  # dtype, device
        hidden = self.in_channels * ratio
        with torch.no_grad():
            block.expand.conv.weight.copy_(self.expand.conv.weight[:hidden])
            block.depthwise.conv.weight.copy_(self._depthwise_weight(hidden, kernel))
            block.project.conv.weight.copy_(self.project.conv.weight[:, :hidden])
        for name in ('expand', 'depthwise', 'project'):
            copy_bn(getattr(self, name).bn, getattr(block, name).bn)
        return block.train(self.training)
