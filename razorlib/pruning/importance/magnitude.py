"""Weight criteria: L1 and L2 magnitude, BN scale (network slimming), FPGM.

Each reads, for every use of a group, the weights that pruning a channel removes
(:meth:`ImportanceContext.weights`), one row per channel.
"""
from typing import Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from ...registry import IMPORTANCES
from ...tracing.context import ChannelUse
from .base import Importance, ImportanceContext

__all__ = ['L1Importance', 'L2Importance', 'BNScaleImportance', 'FPGMImportance']


class _RowScore(Importance):
    """A local score per row of each use's channel weights."""

    def row_scores(self, rows: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def use_scores(self, ctx: ImportanceContext) -> Iterator[Tuple[ChannelUse, np.ndarray]]:
        for use in self.uses(ctx):
            rows = ctx.weights(use)
            if rows is not None:
                yield use, self.row_scores(rows.double()).cpu().numpy()


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
        self.norm_scales = norm_scales

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

    def row_scores(self, rows: torch.Tensor) -> torch.Tensor:
        return rows.abs().sum(1)


@IMPORTANCES.register_module(name=['FPGMImportance', 'fpgm'])
class FPGMImportance(_RowScore):
    """Filter pruning via geometric median (He et al., 2019): a channel whose weights lie
    near the others' geometric median is replaceable by them.

    A row's score is its summed Euclidean distance to the other rows of the same use;
    the row nearest the median scores lowest.  Reads output filters by default.

    Example:
        >>> rows = torch.tensor([[0., 0.], [1., 0.], [4., 0.]])
        >>> FPGMImportance().row_scores(rows).tolist()
        [5.0, 4.0, 7.0]
    """
    roles = ('out', )

    def row_scores(self, rows: torch.Tensor) -> torch.Tensor:
        return torch.cdist(rows[None], rows[None])[0].sum(1)
