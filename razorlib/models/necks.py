"""Necks: what turns a backbone's feature map into a feature vector."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from ..registry import MODELS


def global_average_pool(x: torch.Tensor) -> torch.Tensor:
    """NCHW -> NC: the mean of each channel over its spatial positions.

    Example:
        >>> global_average_pool(torch.ones(2, 8, 4, 4)).shape
        torch.Size([2, 8])
    """
    return torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)


@MODELS.register_module()
class GlobalAveragePooling(nn.Module):
    """Average each channel over its spatial positions: NCHW -> NC.

    Example:
        >>> GlobalAveragePooling()(torch.randn(2, 8, 4, 4)).shape
        torch.Size([2, 8])
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return global_average_pool(x)
