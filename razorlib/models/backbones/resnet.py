"""ResNet and ResNeXt (torchvision's v1.5 layout: the stride sits on the 3x3 conv)."""
from typing import Dict, Optional, Sequence, Tuple, Type

import torch
import torch.nn as nn

from ...registry import MODELS
from .base import BaseBackbone, ConvBNAct, make_stem


def _shortcut(in_channels: int, out_channels: int, stride: int) -> Optional[nn.Module]:
    """A 1x1 conv + BN projection where the residual changes shape, else ``None``."""
    if stride == 1 and in_channels == out_channels:
        return None
    return ConvBNAct(in_channels, out_channels, 1, stride, act=None)


class BasicBlock(nn.Module):
    """Two 3x3 convs and a residual add (ResNet-18/34).

    Args:
        in_channels: input channels.
        planes: output channels of the block.
        stride: stride of the first conv.
        groups: must be 1; the argument keeps the block constructors alike.
        width_per_group: must be 64, for the same reason.

    Example:
        >>> BasicBlock(8, 16, stride=2)(torch.randn(1, 8, 8, 8)).shape
        torch.Size([1, 16, 4, 4])
    """
    expansion = 1

    def __init__(self, in_channels: int, planes: int, stride: int = 1, groups: int = 1,
                 width_per_group: int = 64):
        super().__init__()
        if groups != 1 or width_per_group != 64:
            raise ValueError('BasicBlock (ResNet-18/34) supports only groups=1 and '
                             'width_per_group=64; use depth >= 50 for ResNeXt')
        self.conv1 = ConvBNAct(in_channels, planes, 3, stride)
        self.conv2 = ConvBNAct(planes, planes, 3, act=None)
        self.downsample = _shortcut(in_channels, planes, stride)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        return self.relu(self.conv2(self.conv1(x)) + identity)


class Bottleneck(nn.Module):
    """1x1 reduce -> 3x3 (grouped for ResNeXt) -> 1x1 expand, plus a residual add.

    Args:
        in_channels: input channels.
        planes: the stage width; the block outputs ``planes * 4`` channels.
        stride: stride of the 3x3 conv.
        groups: groups of the 3x3 conv (ResNeXt cardinality).
        width_per_group: channels per group of the 3x3 conv at ``planes=64``.

    Example:
        >>> Bottleneck(16, 8, stride=2, groups=2, width_per_group=16)(
        ...     torch.randn(1, 16, 8, 8)).shape
        torch.Size([1, 32, 4, 4])
    """
    expansion = 4

    def __init__(self, in_channels: int, planes: int, stride: int = 1, groups: int = 1,
                 width_per_group: int = 64):
        super().__init__()
        width = int(planes * width_per_group / 64) * groups
        self.conv1 = ConvBNAct(in_channels, width, 1)
        self.conv2 = ConvBNAct(width, width, 3, stride, groups=groups)
        self.conv3 = ConvBNAct(width, planes * self.expansion, 1, act=None)
        self.downsample = _shortcut(in_channels, planes * self.expansion, stride)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        return self.relu(self.conv3(self.conv2(self.conv1(x))) + identity)


ARCH_SETTINGS: Dict[int, Tuple[Type[nn.Module], Tuple[int, ...]]] = {
    18: (BasicBlock, (2, 2, 2, 2)),
    34: (BasicBlock, (3, 4, 6, 3)),
    50: (Bottleneck, (3, 4, 6, 3)),
    101: (Bottleneck, (3, 4, 23, 3)),
    152: (Bottleneck, (3, 8, 36, 3)),
}


@MODELS.register_module()
class ResNet(BaseBackbone):
    """ResNet (He et al., 2016) and ResNeXt (``groups > 1``, Xie et al., 2017).

    Four stages of residual blocks after a stem; stage ``i`` has ``base_channels * 2**i``
    planes and halves the resolution (except stage 0).

    Args:
        depth: 18, 34 (basic blocks) or 50, 101, 152 (bottlenecks).
        in_channels: image channels.
        base_channels: stem width and planes of the first stage.
        groups: cardinality of the bottleneck 3x3 convs (ResNeXt); 1 for ResNet.
        width_per_group: bottleneck 3x3 channels per group at 64 planes
            (ResNeXt-50 32x4d is ``groups=32, width_per_group=4``).
        num_classes: add a pooled linear classifier with this many classes.
        stem: ``'imagenet'`` (7x7 stride-2 conv + max pool, 4x downsampling) or
            ``'cifar'`` (3x3 stride-1 conv, no pooling, for 8x8 to 32x32 images).
        out_indices: return the outputs of these stages (0-3) instead.

    Example:
        >>> net = ResNet(depth=18, stem='cifar', num_classes=10)
        >>> net(torch.randn(2, 3, 32, 32)).shape
        torch.Size([2, 10])
        >>> [o.shape[1] for o in ResNet(depth=50, out_indices=(2, 3))(
        ...     torch.randn(1, 3, 64, 64))]
        [1024, 2048]
    """

    def __init__(self, depth: int = 50, in_channels: int = 3, base_channels: int = 64,
                 groups: int = 1, width_per_group: int = 64, num_classes: Optional[int] = None,
                 stem: str = 'imagenet', out_indices: Optional[Sequence[int]] = None):
        if depth not in ARCH_SETTINGS:
            raise ValueError(f'ResNet depth must be one of {sorted(ARCH_SETTINGS)}, '
                             f'got {depth}')
        block, num_blocks = ARCH_SETTINGS[depth]
        stages, stage_channels, channels = [], [], base_channels
        for index, count in enumerate(num_blocks):
            planes = base_channels * 2**index
            blocks = []
            for block_index in range(count):
                stride = 2 if index > 0 and block_index == 0 else 1
                blocks.append(block(channels, planes, stride, groups, width_per_group))
                channels = planes * block.expansion
            stages.append(nn.Sequential(*blocks))
            stage_channels.append(channels)
        stem_module = make_stem(in_channels, base_channels, stem, kernel_size=7)
        super().__init__(stem_module, stages, stage_channels, num_classes, out_indices)
        self.depth = depth
