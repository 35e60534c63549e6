"""Activation criteria: how strongly, and how often, the layers reading a channel see it.

Both run the model (eval mode, no grad) on the batches of ``data`` and read each
consumer's input, after the activation function that precedes it.
"""
from typing import Dict, Iterator, Tuple

import numpy as np
import torch

from ...registry import IMPORTANCES
from ...tracing.context import ChannelUse
from .base import Importance, ImportanceContext
from .probes import channel_sums, observe, points_of

__all__ = ['ActivationImportance', 'APoZImportance']


class _ActivationStatistic(Importance):
    """A per-channel mean of :meth:`statistic` over every sample and position."""
    roles = ('in', )
    needs_data = True
    name = ''

    def statistic(self, tensor: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def use_scores(self, ctx: ImportanceContext) -> Iterator[Tuple[ChannelUse, np.ndarray]]:
        points = points_of(ctx, self.uses(ctx))
        sums: Dict[int, torch.Tensor] = {}
        counts: Dict[int, int] = {}

        def record(i: int, tensor: torch.Tensor) -> None:
            dim = points[i].dim
            total = channel_sums(self.statistic(tensor.detach()).double(), dim)
            sums[i] = sums[i] + total if i in sums else total
            counts[i] = counts.get(i, 0) + tensor.numel() // tensor.shape[dim]

        observe(ctx, points, self.name, record)
        for i, total in sums.items():
            yield points[i].use, self.finish(total / counts[i]).cpu().numpy()

    def finish(self, mean: torch.Tensor) -> torch.Tensor:
        return mean


@IMPORTANCES.register_module(name=['ActivationImportance', 'activation'])
class ActivationImportance(_ActivationStatistic):
    """The mean ``|activation|`` of each channel at the inputs of the layers that read it.

    Example:
        >>> ActivationImportance().statistic(torch.tensor([-2., 0., 1.])).tolist()
        [2.0, 0.0, 1.0]
    """
    name = 'activation'

    def statistic(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.abs()


@IMPORTANCES.register_module(name=['APoZImportance', 'apoz'])
class APoZImportance(_ActivationStatistic):
    """One minus the average percentage of zeros (Hu et al., 2016) of each channel at the
    inputs of the layers that read it: a channel a ReLU silences on most inputs scores
    low.  Without a ReLU before the consumers, every channel scores about 1.

    Example:
        >>> APoZImportance().finish(torch.tensor([0.25, 1.0])).tolist()
        [0.75, 0.0]
    """
    name = 'apoz'

    def statistic(self, tensor: torch.Tensor) -> torch.Tensor:
        return (tensor == 0).to(torch.float64)

    def finish(self, mean: torch.Tensor) -> torch.Tensor:
        return 1 - mean
