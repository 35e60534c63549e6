"""Weight criteria: L1 and L2 magnitude, BN scale (network slimming), FPGM.

Each reads, for every use of a group, the weights that pruning a channel removes
(:meth:`ImportanceContext.weights`), one row per channel: the rows of a channel's slots in
one use (the H*W columns a Linear after a flatten reads it through) side by side.
"""
from typing import Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from ...layers import NormKind
from ...registry import IMPORTANCES
from ...tracing.context import ChannelUse
from ...utils.checks import switch
from .base import Importance, ImportanceContext

__all__ = ['L1Importance', 'L2Importance', 'BNScaleImportance', 'FPGMImportance']


def concatenate_rows(rows: torch.Tensor, inverse: np.ndarray, channels: int) -> torch.Tensor:
    """``(channels, k * n)``: channel ``c``'s row is the rows ``i`` with ``inverse[i] == c``
    side by side, zero-padded to the ``k`` rows of the channel with most.

    One row per channel is what it owns in the use, so that a norm is taken over all of
    it (not summed over its slots); the padding adds nothing to a norm.

    Example:
        >>> concatenate_rows(torch.tensor([[1.], [2.], [3.]]), np.array([1, 0, 1]), 2).tolist()
        [[2.0, 0.0], [1.0, 3.0]]
    """
    index = torch.as_tensor(inverse, dtype=torch.long, device=rows.device)
    order = torch.argsort(index, stable=True)
    counts = torch.bincount(index, minlength=channels)
    start = torch.cumsum(counts, 0) - counts
    rank = torch.arange(len(index), device=rows.device) - start[index[order]]
    merged = rows.new_zeros(channels, int(counts.max()), rows.shape[1])
    merged[index[order], rank] = rows[order]
    return merged.flatten(1)


class _RowScore(Importance):
    """A local score per channel of each use, from the weights it owns there."""

    def row_scores(self, rows: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def channel_scores(self, rows: torch.Tensor, inverse: np.ndarray,
                       channels: int) -> torch.Tensor:
        """One score per channel of a use from ``rows``, one per slot, the channel of
        slot ``i`` being ``inverse[i]``: :meth:`row_scores` of each channel's rows side by
        side (:func:`concatenate_rows`)."""
        if channels == len(inverse):  # a slot per channel: reorder only
            if (np.diff(inverse) != 1).any():
                rows = rows[torch.as_tensor(np.argsort(inverse), device=rows.device)]
            return self.row_scores(rows)
        return self.row_scores(concatenate_rows(rows, inverse, channels))

    def uses(self, ctx: ImportanceContext) -> List[ChannelUse]:
        """The uses in :attr:`roles`, but one of the two of a layer that passes its
        channels on (:attr:`ImportanceContext.passes_on`, a depthwise conv): its input
        and output uses return the same filter, which pruning removes once."""
        uses = super().uses(ctx)
        read = {use.name for use in uses if use.role == 'in'}
        return [use for use in uses
                if use.role != 'out' or use.name not in read or use.name not in ctx.passes_on]

    def use_scores(self, ctx: ImportanceContext) -> Iterator[Tuple[ChannelUse, np.ndarray]]:
        for use in self.uses(ctx):
            rows = ctx.weights(use)
            if rows is not None:
                merged, inverse = ctx.channels(use)
                scores = self.channel_scores(rows.double(), inverse, len(merged.slots))
                yield merged, scores.cpu().numpy()


class _Magnitude(_RowScore):
    """A weight norm per channel, with batch norms' scales read in place of the filters
    they normalise.

    A channel normalised by its own statistics (a BatchNorm after the conv that writes
    it) leaves the norm at the same scale however large that conv's filter is: the
    norm divides it out, and its ``|gamma|`` sets what the channel passes on.  So with
    ``norm_scales=True`` (default) a producer's output filter is not read where every
    channel it writes is normalised per channel in its group; the norm's ``|gamma|`` is
    read instead, beside the consumers' input columns.  Groups without such a norm (a
    transformer's, under LayerNorm or RMSNorm) are read as ``roles`` says.
    ``norm_scales=False`` reads every use in ``roles``.

    On a trained digits ResNet-18 pruned to 50%, 25% and 10% of its FLOPs and
    distilled for 5 epochs, ``l1`` and ``l2`` with the norms' scales end with 1.1 to 2.1 times
    lower KL from the dense model than with the filters (mean of 4 fine-tuning seeds;
    ``benchmarks/README.md``).
    """
    shown = ('reduction', 'normalize', 'roles', 'norm_scales')

    def __init__(self, reduction: str = 'sum', normalize: Optional[str] = None,
                 roles: Union[Sequence[str], str, None] = None, norm_scales: bool = True):
        super().__init__(reduction=reduction, normalize=normalize, roles=roles)
        self.norm_scales = switch(norm_scales, f'{type(self).__name__}: norm_scales')

    def uses(self, ctx: ImportanceContext) -> List[ChannelUse]:
        uses = super().uses(ctx)
        if not self.norm_scales or 'out' not in self.roles:
            return uses
        norms = [use for use in ctx.uses if use.role == 'norm' and getattr(
            ctx.kinds.kind_of(ctx.modules[use.name]), 'per_channel_statistics', False)]
        if not norms:
            return uses
        normalised = np.unique(np.concatenate([_keys(ctx, use) for use in norms]))
        kept = [use for use in uses if use.role != 'out' or
                not np.isin(_keys(ctx, use), normalised).all()]
        return kept + [use for use in norms if all(use is not k for k in kept)]


def _keys(ctx: ImportanceContext, use: ChannelUse) -> np.ndarray:
    """One integer per prunable channel of ``use``: its group and position in it."""
    owner, position = ctx.locate(use)
    hit = owner >= 0
    return owner[hit].astype(np.int64) * (1 << 32) + position[hit]


@IMPORTANCES.register_module(name=['L1Importance', 'l1'])
class L1Importance(_Magnitude):
    """The L1 norm of the weights each channel owns (Li et al., 2017), summed over the
    group by default: the input columns of every layer that reads the channel, and the
    output filters of every layer that writes it, or, where a batch norm normalises
    it, that norm's ``|gamma|`` (``norm_scales``, see :class:`_Magnitude`).

    ``roles='all'`` adds every norm's scale and bare parameters.

    Example:
        >>> rows = torch.tensor([[1., -2.], [0., 3.]])
        >>> L1Importance().row_scores(rows).tolist()
        [3.0, 3.0]
    """

    def row_scores(self, rows: torch.Tensor) -> torch.Tensor:
        return rows.abs().sum(1)


@IMPORTANCES.register_module(name=['L2Importance', 'l2'])
class L2Importance(_Magnitude):
    """The L2 norm of the weights each channel owns, over the same uses as L1.

    Example:
        >>> L2Importance().row_scores(torch.tensor([[3., -4.], [0., 1.]])).tolist()
        [5.0, 1.0]
    """

    def row_scores(self, rows: torch.Tensor) -> torch.Tensor:
        return rows.pow(2).sum(1).sqrt()


@IMPORTANCES.register_module(name=['BNScaleImportance', 'bn_scale'])
class BNScaleImportance(_RowScore):
    """``|gamma|`` of the norms on the channel (network slimming, Liu et al., 2017).

    Reads the ``norm`` uses only: a group without a norm is not scored and a pruner
    keeps it whole.

    Example:
        >>> BNScaleImportance().row_scores(torch.tensor([[-0.5], [2.0]])).tolist()
        [0.5, 2.0]
    """
    roles = ('norm', )

    def uses(self, ctx: ImportanceContext) -> List[ChannelUse]:
        """The norms' uses: a PReLU's slopes follow its channels as a norm's scales do,
        but scale no normalised channel."""
        return [use for use in super().uses(ctx)
                if isinstance(ctx.kinds.kind_of(ctx.modules[use.name]), NormKind)]

    def row_scores(self, rows: torch.Tensor) -> torch.Tensor:
        return rows.abs().sum(1)


@IMPORTANCES.register_module(name=['FPGMImportance', 'fpgm'])
class FPGMImportance(_RowScore):
    """Filter pruning via geometric median (He et al., 2019): a channel whose weights lie
    near the others' geometric median is replaceable by them.

    A channel's score is the summed Euclidean distance from the weights it owns in a use
    to those each other channel of the use owns there; the channel nearest the median
    scores lowest.  Reads output filters by default.

    A channel that owns several slots of the use (a group conv's bound slots, a
    depthwise conv's outputs) is one vector of all its rows, compared only with the
    channels that own as many: a channel of fewer rows padded with zeros would be a
    point that is not its weights, at distances that are not theirs.

    Example:
        >>> rows = torch.tensor([[0., 0.], [1., 0.], [4., 0.]])
        >>> FPGMImportance().row_scores(rows).tolist()
        [5.0, 4.0, 7.0]
    """
    roles = ('out', )

    def row_scores(self, rows: torch.Tensor) -> torch.Tensor:
        return torch.cdist(rows[None], rows[None])[0].sum(1)

    def channel_scores(self, rows: torch.Tensor, inverse: np.ndarray,
                       channels: int) -> torch.Tensor:
        """The distances among the channels that own the same number of the use's slots,
        so that every vector compared is one channel's weights, unpadded."""
        sizes = np.bincount(inverse, minlength=channels)
        scores = rows.new_zeros(channels)
        for size in np.unique(sizes).tolist():
            alike = np.flatnonzero(sizes == size)
            picked = np.isin(inverse, alike)
            local = np.searchsorted(alike, inverse[picked])  # channel index among ``alike``
            rows_alike = rows[torch.as_tensor(np.flatnonzero(picked), device=rows.device)]
            scores[torch.as_tensor(alike, device=rows.device)] = super().channel_scores(
                rows_alike, local, len(alike))
        return scores
