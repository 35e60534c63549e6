"""Activation criteria: how strongly, and how often, the layers reading a channel see it.

Each runs the model (eval mode, no grad) on the batches of ``data`` and reads each
consumer's input, after the activation function that precedes it.  The hooks keep one
vector per consumer (a running per-channel sum), never the activations themselves, so
scoring costs the memory of a no-grad forward: one layer's activations at a time.
"""
from typing import Dict, Iterator, Optional, Tuple

import numpy as np
import torch

from ...registry import IMPORTANCES
from ...tracing.context import ChannelUse
from .base import Importance, ImportanceContext
from .probes import channel_sums, observe, points_of

__all__ = ['ActivationImportance', 'APoZImportance', 'ActivationMagnitudeImportance']


class _ActivationStatistic(Importance):
    """A per-channel mean of :meth:`statistic` over every sample and position: at a
    consumer reading a channel through several slots (a Linear after a flatten), over
    all of them, so a mean stays a mean (an APoZ score in [0, 1]).  A consumer the data
    never reached (a routed expert no token was sent to) reads as a channel that never
    activated: the statistic of a zero."""
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
            use, inverse = ctx.channels(points[i].use)
            index = torch.as_tensor(inverse, device=total.device)
            pooled = total.new_zeros(len(use.slots)).index_add_(0, index, total)
            values = torch.bincount(index, minlength=len(use.slots)) * counts[i]
            mean = pooled / values if counts[i] else \
                self.statistic(pooled.new_zeros(len(use.slots)))
            yield use, self.finish(mean).cpu().numpy()

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


@IMPORTANCES.register_module(name=['ActivationMagnitudeImportance', 'wanda'])
class ActivationMagnitudeImportance(Importance):
    """Wanda's score (Sun et al., 2023, "A Simple and Effective Pruning Approach for
    Large Language Models") made structured: a channel read by a consumer scores the sum,
    over the consumer's outputs ``i``, of ``|W_ij| * ||X_j||``, with ``||X_j||`` the L2 norm
    of input channel ``j`` over every calibration sample and position.

    Wanda scores single weights this way; summed over the input column a channel owns, it
    is what the consumer's output loses when the channel goes, so a channel with large
    weights that the data never excites scores nothing, however large the weights.  A
    channel read by several consumers (the hidden size read by q, k, v, gate and up) sums
    them (``reduction``); a head sums its channels, since razorlib binds a head's
    channels into one class of its q/k/v/o group.

    Reads consumers' inputs only (role ``in``): a producer's output row measures the
    channel before the activation function and the gate that follow it, which the
    consumer's input norm already sees after them; added as L1 would add it, it mixes
    weight units with weight-times-activation units and lets the wider scale decide.

    Memory: one vector of squared sums per consumer, accumulated in the forward hooks
    (float32 per batch, float64 across batches); the forward runs without grad, so a 7B
    model needs one layer's activations at once, not the whole network's (its weights
    must still fit: layers are not loaded one by one).

    Args:
        reduction, normalize: as :class:`~razorlib.pruning.importance.Importance`.

    Example:
        >>> columns = torch.tensor([[1., -2.], [0., 3.]])  # input channel -> its weights
        >>> ActivationMagnitudeImportance.column_scores(columns, torch.tensor([2., 0.])).tolist()
        [6.0, 0.0]
    """
    roles = ('in', )
    needs_data = True
    shown = ('reduction', 'normalize')

    def __init__(self, reduction: str = 'sum', normalize: Optional[str] = None):
        super().__init__(reduction=reduction, normalize=normalize, roles=('in', ))

    @staticmethod
    def column_scores(columns: torch.Tensor, norms: torch.Tensor) -> torch.Tensor:
        """``sum_i |W_ij| * ||X_j||`` per input channel ``j``: ``columns`` holds one row of
        weights per input channel, ``norms`` the channels' activation norms."""
        return columns.abs().sum(1, dtype=torch.float64) * norms.double()

    def use_scores(self, ctx: ImportanceContext) -> Iterator[Tuple[ChannelUse, np.ndarray]]:
        points = points_of(ctx, self.uses(ctx))
        squares: Dict[int, torch.Tensor] = {}

        def record(i: int, tensor: torch.Tensor) -> None:
            total = channel_sums(tensor.detach().float().square(), points[i].dim).double()
            squares[i] = squares[i] + total if i in squares else total

        observe(ctx, points, 'wanda', record)
        if points and not squares:
            raise RuntimeError("importance 'wanda': no consumer of a prunable group ran on "
                               'the data batches; do the batches fit the model?')
        for i, total in sorted(squares.items()):
            columns = ctx.weights(points[i].use)
            if columns is not None:
                norms = total.sqrt().to(columns.device)
                yield points[i].use, self.column_scores(columns, norms).cpu().numpy()
