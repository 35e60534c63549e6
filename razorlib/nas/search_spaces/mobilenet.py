"""SearchableMobileNet: MBConv blocks with searchable kernel, expand ratio, skip and depth."""
from typing import Optional, Sequence, Tuple

import torch.nn as nn

from ...models.backbones import BaseBackbone, ConvBNAct, make_stem
from ...registry import MODELS
from ..checks import integer, integers
from ..mutables import OneShotMutableOP
from ..ops import DynamicMBConv, DynamicStage
from ..ops.mbconv import check_expand_ratios

#: A ProxylessNAS-like ImageNet layout: (channels, blocks, stride) per stage.
MBCONV_IMAGENET_SETTING = ((24, 4, 2), (40, 4, 2), (80, 4, 2), (96, 4, 1), (192, 4, 2),
                           (320, 1, 1))


def check_arch_setting(arch_setting, owner: str) -> list:
    """``arch_setting`` rows as ``(channels, num_blocks, stride)`` of positive ints.

    Raises:
        ValueError: naming ``owner``, the row and the field with the bad value.
    """
    rows = []
    for index, row in enumerate(arch_setting):
        if isinstance(row, (str, bytes)) or not isinstance(row, Sequence) or len(row) != 3:
            raise ValueError(f'{owner}: arch_setting[{index}] must be (channels, num_blocks, '
                             f'stride), got {row!r}')
        rows.append(tuple(integer(value, owner, f'arch_setting[{index}][{field}] ({name})',
                                  minimum=1)
                          for field, (name, value) in enumerate(
                              zip(('channels', 'num_blocks', 'stride'), row))))
    return rows


def check_ints(owner: str, **values) -> None:
    """Each keyword is None or a positive integer (channel counts, classes)."""
    for key, value in values.items():
        if value is not None:
            integer(value, owner, key, minimum=1)


@MODELS.register_module()
class SearchableMobileNet(BaseBackbone):
    """A MobileNet supernet of :class:`~razorlib.nas.DynamicMBConv` blocks.

    Every block searches its kernel size and expand ratio (weight-shared values).  With
    ``skip``, each block after the first of a stage is a ``OneShotMutableOP`` between
    the block and ``'skip'`` (identity); with ``depths``, a stage runs only its first
    ``depth`` blocks (a searchable value).  The first block of a stage always runs: it
    changes the width and the resolution.

    Args:
        arch_setting: ``(channels, num_blocks, stride)`` per stage (the deepest form).
        stem_channels: stem width.
        first_channels: width of a plain 3x3 depthwise-separable block after the stem
            (MobileNet's first layer); None for none.
        last_channels: width of the final 1x1 conv; None for none.
        kernel_sizes: kernel size choices of every block (odd integers).
        expand_ratios: expand ratio choices of every block (whole numbers, int or
            float).
        skip: let every block but the first of a stage be skipped.
        depths: per stage, its depth choices (integers; a ``DynamicStage``); None: fixed
            depth.
        in_channels: image channels.
        num_classes: add a pooled linear classifier with this many classes.
        stem: ``'imagenet'`` (stride 2) or ``'cifar'`` (stride 1).

    Example:
        >>> import torch
        >>> net = SearchableMobileNet(arch_setting=[(16, 2, 2)], stem_channels=8,
        ...                           stem='cifar', num_classes=10, depths=[(1, 2)])
        >>> net(torch.randn(2, 3, 8, 8)).shape
        torch.Size([2, 10])
        >>> from razorlib.nas import NasMutator
        >>> for key in NasMutator(net).choices:
        ...     print(key)
        stages.0.depth
        stages.0.blocks.0.kernel_size
        stages.0.blocks.0.expand_ratio
        stages.0.blocks.1
        stages.0.blocks.1.candidates.mbconv.kernel_size
        stages.0.blocks.1.candidates.mbconv.expand_ratio
    """

    def __init__(self, arch_setting: Sequence[Tuple[int, int, int]] = MBCONV_IMAGENET_SETTING,
                 stem_channels: int = 32, first_channels: Optional[int] = 16,
                 last_channels: Optional[int] = 1280,
                 kernel_sizes: Sequence[int] = (3, 5, 7), expand_ratios: Sequence[int] = (3, 6),
                 skip: bool = True, depths: Optional[Sequence[Sequence[int]]] = None,
                 in_channels: int = 3, num_classes: Optional[int] = None,
                 stem: str = 'imagenet'):
        arch_setting = check_arch_setting(arch_setting, 'SearchableMobileNet')
        check_ints('SearchableMobileNet', stem_channels=stem_channels,
                   first_channels=first_channels, last_channels=last_channels,
                   in_channels=in_channels, num_classes=num_classes)
        kernel_sizes = integers(kernel_sizes, 'SearchableMobileNet', 'kernel_sizes', minimum=1)
        check_expand_ratios(expand_ratios, 'SearchableMobileNet')
        if depths is not None:
            depths = [integers(row, 'SearchableMobileNet', f'depths[{index}]', minimum=1)
                      for index, row in enumerate(depths)]
        if depths is not None and len(depths) != len(arch_setting):
            raise ValueError(f'depths names {len(depths)} stages, arch_setting has '
                             f'{len(arch_setting)}')
        stem_module = make_stem(in_channels, stem_channels, stem, max_pool=False,
                                act=nn.ReLU6)
        channels = stem_channels
        if first_channels is not None:
            stem_module.append(nn.Sequential(
                ConvBNAct(channels, channels, 3, groups=channels, act=nn.ReLU6),
                ConvBNAct(channels, first_channels, 1, act=None)))
            channels = first_channels
        stages, widths = [], []
        for row, (width, num_blocks, stride) in enumerate(arch_setting):
            blocks = []
            for index in range(num_blocks):
                block = DynamicMBConv(channels, width, stride if index == 0 else 1,
                                      kernel_sizes, expand_ratios)
                if skip and index > 0:
                    block = OneShotMutableOP(dict(mbconv=block, skip=nn.Identity()))
                blocks.append(block)
                channels = width
            stages.append(nn.Sequential(*blocks) if depths is None
                          else DynamicStage(blocks, depths[row]))
            widths.append(width)
        if last_channels is not None:
            stages.append(ConvBNAct(channels, last_channels, 1, act=nn.ReLU6))
            widths.append(last_channels)
        super().__init__(stem_module, stages, widths, num_classes)
