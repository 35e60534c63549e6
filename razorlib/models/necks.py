"""Necks: what turns a backbone's feature map into a feature vector."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from ..registry import MODELS


@MODELS.register_module()
class GlobalAveragePooling(nn.Module):
    """Average each channel over its spatial positions: NCHW -> NC.

    Example:
        >>> GlobalAveragePooling()(torch.randn(2, 8, 4, 4)).shape
        torch.Size([2, 8])
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
