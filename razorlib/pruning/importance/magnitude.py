"""Weight criteria: L1 and L2 magnitude, BN scale (network slimming), FPGM.

Each reads, for every use of a group, the weights that pruning a channel removes
(:meth:`ImportanceContext.weights`), one row per channel.
"""
from typing import Iterator, Tuple

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


@IMPORTANCES.register_module(name=['L1Importance', 'l1'])
class L1Importance(_RowScore):
    """The L1 norm of the weights each channel owns (Li et al., 2017), summed over the
    group by default: the output filters of every layer that writes the channel and the
    input columns of every layer that reads it.

    ``roles='all'`` adds the norms' scales and bare parameters.

    Example:
        >>> rows = torch.tensor([[1., -2.], [0., 3.]])
        >>> L1Importance().row_scores(rows).tolist()
        [3.0, 3.0]
    """

    def row_scores(self, rows: torch.Tensor) -> torch.Tensor:
        return rows.abs().sum(1)


@IMPORTANCES.register_module(name=['L2Importance', 'l2'])
class L2Importance(_RowScore):
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
