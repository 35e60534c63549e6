"""The frame every backbone family shares: stem, stages, optional pooled classifier.

A family builds its stem and its stages and hands them to :class:`BaseBackbone`, which
owns ``forward``, ``out_indices`` and the optional ``fc``.  Nothing here reads a channel
count at run time, so the backbones keep working after a pruner slices their layers.
"""
from collections import OrderedDict
from typing import Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn

from ..necks import global_average_pool

STEMS = ('imagenet', 'cifar')


def make_divisible(value: float, divisor: int = 8, min_value: Optional[int] = None) -> int:
    """Round ``value`` to the nearest multiple of ``divisor``, losing at most 10%.

    Args:
        value: the wanted channel count.
        divisor: the multiple to round to.
        min_value: the smallest result allowed; default ``divisor``.

    Returns:
        The rounded channel count.

    Example:
        >>> make_divisible(32 * 0.35), make_divisible(1280 * 1.4)
        (16, 1792)
    """
    min_value = divisor if min_value is None else min_value
    rounded = max(min_value, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


class ConvBNAct(nn.Sequential):
    """``conv`` -> ``bn`` -> ``act`` (optional) as plain torch modules, bias-free conv.

    Args:
        in_channels: input channels.
        out_channels: output channels.
        kernel_size: square kernel size; padding keeps the size at stride 1.
        stride: conv stride.
        groups: conv groups (``in_channels`` for a depthwise conv).
        act: activation class such as ``nn.ReLU`` or ``nn.ReLU6``; ``None`` for none.

    Example:
        >>> block = ConvBNAct(3, 8, 3, stride=2, act=nn.ReLU6)
        >>> block(torch.randn(1, 3, 8, 8)).shape
        torch.Size([1, 8, 4, 4])
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int = 3,
                 stride: int = 1, groups: int = 1, act: Optional[type] = nn.ReLU):
        layers = OrderedDict(
            conv=nn.Conv2d(in_channels, out_channels, kernel_size, stride,
                           padding=kernel_size // 2, groups=groups, bias=False),
            bn=nn.BatchNorm2d(out_channels))
        if act is not None:
            layers['act'] = act(inplace=True)
        super().__init__(layers)


def make_stem(in_channels: int, out_channels: int, stem: str, kernel_size: int = 3,
              max_pool: bool = True, act: type = nn.ReLU) -> nn.Sequential:
    """The stem of a family in its ImageNet form or its small-image (CIFAR) form.

    Args:
        in_channels: image channels.
        out_channels: stem width.
        stem: ``'imagenet'``: a stride-2 ``kernel_size`` conv, then a stride-2 3x3 max
            pool if ``max_pool``; ``'cifar'``: a stride-1 3x3 conv and nothing else.
        kernel_size: kernel of the ImageNet stem conv.
        max_pool: whether the ImageNet stem ends with a max pool.
        act: activation class after the stem conv.

    Example:
        >>> make_stem(3, 8, 'imagenet', 7)(torch.randn(1, 3, 32, 32)).shape
        torch.Size([1, 8, 8, 8])
    """
    if stem not in STEMS:
        raise ValueError(f'stem must be one of {STEMS}, got {stem!r}')
    if stem == 'cifar':
        return nn.Sequential(ConvBNAct(in_channels, out_channels, 3, act=act))
    layers = [ConvBNAct(in_channels, out_channels, kernel_size, stride=2, act=act)]
    if max_pool:
        layers.append(nn.MaxPool2d(3, stride=2, padding=1))
    return nn.Sequential(*layers)


class BaseBackbone(nn.Module):
    """``stem`` -> ``stages`` -> (global pool -> ``fc`` when ``num_classes`` is set).

    Args:
        stem: the module run before the first stage.
        stages: the stages, in order; ``out_indices`` count them from 0.
        stage_channels: the output channels of each stage.
        num_classes: if set, pool the last stage and classify with a linear ``fc``, so
            the backbone alone is a classifier; ``None`` returns the feature map.
        out_indices: if set, return a tuple of the outputs of these stages (negative
            indices count from the end); cannot be combined with ``num_classes``.

    Example:
        >>> net = BaseBackbone(nn.Identity(), [ConvBNAct(3, 8), ConvBNAct(8, 16, stride=2)],
        ...                    [8, 16], out_indices=(0, 1))
        >>> [tuple(o.shape) for o in net(torch.randn(1, 3, 8, 8))]
        [(1, 8, 8, 8), (1, 16, 4, 4)]
    """

    def __init__(self, stem: nn.Module, stages: Sequence[nn.Module],
                 stage_channels: Sequence[int], num_classes: Optional[int] = None,
                 out_indices: Optional[Sequence[int]] = None):
        super().__init__()
        if len(stages) != len(stage_channels):
            raise ValueError(f'{len(stages)} stages but {len(stage_channels)} stage channels')
        if out_indices is not None and num_classes is not None:
            raise ValueError('out_indices returns stage features and num_classes adds a '
                             'classifier on top: set at most one of them')
        if num_classes is not None and num_classes < 1:
            # nn.Linear would make a 0-wide fc (logits of shape (N, 0)) without a word, and
            # name no argument for a negative count
            raise ValueError(f'num_classes must be positive (or None for no fc), got '
                             f'{num_classes}')
        self.stem = stem
        self.stages = nn.Sequential(*stages)
        self.stage_channels = tuple(stage_channels)
        self.out_indices = None if out_indices is None else \
            self._normalise_indices(out_indices, len(stages))
        self.num_classes = num_classes
        self.fc = None if num_classes is None else nn.Linear(self.stage_channels[-1],
                                                             num_classes)
        self._init_weights()

    @staticmethod
    def _normalise_indices(indices: Sequence[int], num_stages: int) -> Tuple[int, ...]:
        if not len(indices):
            # forward and num_features read the last index: a bare IndexError otherwise
            raise ValueError(f'out_indices is empty: name at least one of the {num_stages} '
                             'stages, or leave it None for the last feature map')
        normalised = []
        for index in indices:
            if not -num_stages <= index < num_stages:
                raise ValueError(f'out_indices {tuple(indices)} out of range for '
                                 f'{num_stages} stages')
            normalised.append(index % num_stages)
        return tuple(sorted(set(normalised)))

    def _init_weights(self) -> None:
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode='fan_out', nonlinearity='relu')
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    @property
    def num_features(self) -> int:
        """Channels of the (last) feature map that ``forward`` returns before any ``fc``."""
        last = self.out_indices[-1] if self.out_indices is not None else -1
        return self.stage_channels[last]

    def forward(self, x: torch.Tensor) -> Union[torch.Tensor, Tuple[torch.Tensor, ...]]:
        x = self.stem(x)
        if self.out_indices is not None:
            outs = []
            for index, stage in enumerate(self.stages[:self.out_indices[-1] + 1]):
                x = stage(x)
                if index in self.out_indices:
                    outs.append(x)
            return tuple(outs)
        x = self.stages(x)
        if self.fc is None:
            return x
        return self.fc(global_average_pool(x))
