"""PlainCNN: a few conv-BN-ReLU layers, for quick tests and tiny images such as digits."""
from typing import Optional, Sequence

import torch.nn as nn

from ...registry import MODELS
from .base import BaseBackbone, ConvBNAct


@MODELS.register_module()
class PlainCNN(BaseBackbone):
    """A stack of 3x3 conv-BN-ReLU stages with no stem and no residuals.

    Args:
        in_channels: image channels.
        channels: output channels of each stage.
        strides: stride of each stage, as many as ``channels``; default 1 for the first
            stage and 2 for the others.
        num_classes: add a pooled linear classifier with this many classes.
        out_indices: return the outputs of these stages instead.

    Example:
        >>> import torch
        >>> net = PlainCNN(in_channels=1, num_classes=10)
        >>> net(torch.randn(4, 1, 8, 8)).shape
        torch.Size([4, 10])
    """

    def __init__(self, in_channels: int = 3, channels: Sequence[int] = (16, 32, 64),
                 strides: Optional[Sequence[int]] = None, num_classes: Optional[int] = None,
                 out_indices: Optional[Sequence[int]] = None):
        if strides is None:
            strides = (1, ) + (2, ) * (len(channels) - 1)
        if len(channels) != len(strides):
            raise ValueError(f'{len(channels)} channels but {len(strides)} strides')
        ins = (in_channels, *channels[:-1])
        stages = [ConvBNAct(i, o, 3, s) for i, o, s in zip(ins, channels, strides)]
        super().__init__(nn.Identity(), stages, channels, num_classes, out_indices)
