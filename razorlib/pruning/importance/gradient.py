"""Gradient criteria: first-order Taylor and GroupFisher, from batches the user gives.

Both read the gradient of the loss with respect to a gate of ones on a channel
(:func:`~.probes.gate_grads`): per sample ``n``, ``f_n = sum(a * dL/da)`` over the
channel's positions, the first-order change of the loss if the channel were zeroed
there (Molchanov et al., 2017).

``loss_fn`` is taken to be a mean over the batch's samples (as the default cross-entropy
is), so a sample's ``f_n`` is its own loss's over the batch size: each batch is weighed
by its size over the mean batch's (:func:`~razorlib.pruning.data.batch_weights`), and
every sample counts alike whether it came in a full batch or in a trailing partial one.

``layerwise=True`` (both criteria) runs every child of an ``nn.ModuleList`` in the
model (a transformer's blocks) under activation checkpointing: the backward keeps the
hidden states at block boundaries plus one block's activations instead of every
activation of the forward, and recomputes each block once (about one forward more).
The scores are the same.
"""
from typing import Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from ...registry import IMPORTANCES
from ..data import batch_weights
from ...tracing.context import ChannelUse
from ...utils.checks import switch
from .base import NORMALIZERS, Importance, ImportanceContext
from .probes import Point, gate_grads, observe, points_of

__all__ = ['TaylorImportance', 'FisherImportance']


@IMPORTANCES.register_module(name=['TaylorImportance', 'taylor'])
class TaylorImportance(Importance):
    """First-order Taylor: the mean over samples of ``|f_n|`` at each use of the group
    (producers' and norms' outputs, consumers' inputs), reduced over the uses; each
    batch's ``f_n`` weighed by its size over the mean batch's (``loss_fn`` a batch mean).

    Needs ``data``; the model runs in eval mode and no parameter gradient is left
    behind.  ``roles=('norm', )`` scores at the norms' outputs only, Molchanov et al.
    (2019)'s gates after batch norm.

    Args:
        layerwise: checkpoint the repeated blocks (every child of an ``nn.ModuleList``,
            such as an LLM's decoder layers): the backward holds the block boundaries'
            hidden states and one block's activations, not the whole forward's, for about
            one more forward; same scores.  A model without an ``nn.ModuleList`` raises
            ``ValueError``.
        reduction, normalize, roles: as for :class:`~.base.Importance`.

    Example:
        >>> IMPORTANCES.build(dict(type='taylor', layerwise=True))
        TaylorImportance(reduction='sum', ..., layerwise=True)
    """
    roles = ('in', 'out', 'norm')
    needs_data = needs_loss = True
    shown = ('reduction', 'normalize', 'roles', 'layerwise')

    def __init__(self, reduction: str = 'sum', normalize: Optional[str] = None,
                 roles: Union[Sequence[str], str, None] = None, layerwise: bool = False):
        super().__init__(reduction=reduction, normalize=normalize, roles=roles)
        self.layerwise = switch(layerwise, f'{type(self).__name__}: layerwise')

    def use_scores(self, ctx: ImportanceContext) -> Iterator[Tuple[ChannelUse, np.ndarray]]:
        points = points_of(ctx, self.uses(ctx))
        channels = [ctx.channels(point.use) for point in points]
        sizes: List[int] = []
        sums: List[Dict[int, torch.Tensor]] = []  # per batch: point -> sum of |f_n|
        for batch in gate_grads(ctx, points, 'taylor', self.layerwise):
            sizes.append(_samples(batch))
            sums.append({i: _per_channel(rows.double(), *channels[i]).abs().sum(0)
                         for i, rows in batch.items()})
        totals: Dict[int, torch.Tensor] = {}
        for weight, batch_sums in zip(batch_weights(sizes), sums):
            for i, total in batch_sums.items():
                totals[i] = totals[i] + weight * total if i in totals else weight * total
        for i, total in totals.items():
            yield channels[i][0], (total / sum(sizes)).cpu().numpy()


def _samples(batch: Dict[int, torch.Tensor]) -> int:
    """The samples a batch of gate gradients holds: the most rows of a point (a point
    called on batches of several sizes, or whose channels are on the first dim, has one)."""
    return max(rows.shape[0] for rows in batch.values())


def _per_channel(rows: torch.Tensor, use: ChannelUse, inverse: np.ndarray) -> torch.Tensor:
    """``(samples, channels of use)``: each sample's gate gradients added up over the
    slots of each channel, so that ``f_n`` sums over all of a channel's positions (the
    H*W columns a Linear after a flatten reads it through) before its absolute value."""
    index = torch.as_tensor(inverse, device=rows.device)
    return rows.new_zeros(rows.shape[0], len(use.slots)).index_add_(1, index, rows)


@IMPORTANCES.register_module(name=['FisherImportance', 'fisher'])
class FisherImportance(Importance):
    """GroupFisher (Liu et al., 2021): the Fisher information of one mask shared by every
    layer that reads a channel, over its cost.

    Per sample, ``f_n`` is summed over the channel's *cut*: every consumer's input, but
    not a depthwise conv's (whose output carries the channel on to the next consumer);
    a group no consumer reads is gated at its producers' outputs.  The score is
    ``sum_n f_n**2 / 2`` accumulated over every batch (each batch's ``f_n`` weighed by its
    size over the mean batch's, ``loss_fn`` a batch mean, so that each sample adds
    alike: batches of one size add as they are), divided by what one channel of the
    group costs:

    - ``normalize_by='flops'``: the FLOPs one live channel of the group removes,
      measured exactly on the model as its masks stand (so a channel costs less once the
      layers that read it are pruned);
    - ``'memory'``: the activation elements one channel occupies at its producers'
      outputs (per sample);
    - ``None``: no division.

    Scores are per group channel, so ``reduction`` does not apply; ``normalize``
    defaults to ``'none'`` (a per-group normalisation would cancel the cost).
    ``layerwise=True`` checkpoints the repeated blocks as for :class:`TaylorImportance`.
    """
    roles = ('in', )
    needs_data = needs_loss = True
    default_normalize = 'none'
    COSTS = (None, 'flops', 'memory')
    shown = ('normalize_by', 'normalize', 'layerwise')

    def __init__(self, normalize_by: Optional[str] = 'flops', normalize: Optional[str] = None,
                 layerwise: bool = False):
        super().__init__(normalize=normalize)
        if normalize_by not in self.COSTS:
            raise ValueError(f'FisherImportance: normalize_by {normalize_by!r} is not one of '
                             f'{self.COSTS}')
        self.normalize_by = normalize_by
        self.layerwise = switch(layerwise, f'{type(self).__name__}: layerwise')

    def __call__(self, ctx: ImportanceContext) -> Dict[str, np.ndarray]:
        points, entries = self._cut(ctx)
        sizes: List[int] = []
        halves: List[Dict[int, torch.Tensor]] = []  # per batch: group -> sum_n f_n**2 / 2
        for batch in gate_grads(ctx, points, 'fisher', self.layerwise):
            sizes.append(_samples(batch))
            halves.append({g: f.pow(2).sum(0) / 2
                           for g, f in _shared_gates(ctx, entries, batch).items()})
        fisher = [torch.zeros(g.num_channels, dtype=torch.float64) for g in ctx.prunable]
        for weight, batch_halves in zip(batch_weights(sizes), halves):
            for g, half in batch_halves.items():
                fisher[g] += weight ** 2 * half  # f_n is linear in the batch's weight
        cost = self._cost(ctx)
        scored = {i for entry in entries for i in entry}
        return {group.id: NORMALIZERS[self.normalize](fisher[i].numpy() / cost[i])
                for i, group in enumerate(ctx.prunable) if i in scored}

    def _cut(self, ctx: ImportanceContext) -> Tuple[List[Point], List[Dict]]:
        """The gated points and, per point, group index -> (its channel columns, their
        positions in the group).

        Every consumer's input is gated but a depthwise conv's (a layer that passes its
        channels on, :attr:`ImportanceContext.passes_on`): the channel it carries on is
        gated where the next layer reads it.  A dense layer whose input and output a
        residual add puts in one group is a consumer like any other.  A group whose
        channels no gated input reads is gated once where they leave its layers
        (:func:`_ends`), at that output only.
        """
        reads = [u for u in ctx.uses if u.role == 'in' and u.name not in ctx.passes_on]
        read = {g for use in reads for g in _groups_of(ctx, use)}
        outs = [u for u in ctx.uses if u.role == 'out']
        unread: Dict[int, List[int]] = {}  # index in outs -> the unread groups gated there
        for g in range(len(ctx.prunable)):
            if g not in read:
                for k in _ends(ctx, g, outs):
                    unread.setdefault(k, []).append(g)
        cut = [(use, None) for use in reads] + [(outs[k], gs) for k, gs in unread.items()]
        points = points_of(ctx, [use for use, _ in cut])
        return points, [_entry(ctx, use, groups) for use, groups in cut]

    def _cost(self, ctx: ImportanceContext) -> List[float]:
        """What one channel of each group costs (ones without ``normalize_by``); for
        FLOPs, what removing one more of its live channels saves from the current
        subnet."""
        if self.normalize_by is None:
            return [1.0] * len(ctx.prunable)
        if self.normalize_by == 'memory':
            return _memory_per_channel(ctx)
        if ctx.measure is None:
            raise ValueError("FisherImportance(normalize_by='flops') measures FLOPs on the "
                             'pruner\'s masked model: score through a pruner '
                             '(ImportancePruner.score) or use normalize_by=None')
        current = ctx.keep_masks()
        now = ctx.measure(current).flops
        costs = []
        for group in ctx.prunable:
            live = current[group.id]
            keep = group.keep_best(np.argsort(~live, kind='stable'), int(live.sum()) - 1)
            removed = int((live & ~keep).sum())
            flops = ctx.measure({**current, group.id: keep}).flops if removed else now
            costs.append(max(now - flops, 1) / max(removed, 1))
        return costs


def _shared_gates(ctx: ImportanceContext, entries: Sequence[Dict],
                  batch: Dict[int, torch.Tensor]) -> Dict[int, torch.Tensor]:
    """Group index -> ``(samples, channels)``: each sample's ``f_n`` of one mask per
    group channel, the gradients of the cut's points (``batch``) added up over every
    layer that reads the channel."""
    per_group: Dict[int, torch.Tensor] = {}
    for i, rows in batch.items():
        for g, (columns, position) in entries[i].items():
            f = per_group.setdefault(g, rows.new_zeros(rows.shape[0],
                                                       ctx.prunable[g].num_channels,
                                                       dtype=torch.float64))
            if f.shape[0] != rows.shape[0]:  # a point called on another batch size
                f = per_group[g] = f.sum(0, keepdim=True)
                rows = rows.sum(0, keepdim=True)
            f.index_add_(1, position, rows[:, columns].double())
    return per_group


def _groups_of(ctx: ImportanceContext, use: ChannelUse) -> List[int]:
    """The indices (in ``ctx.prunable``) of the groups whose channels ``use`` carries."""
    owner, _ = ctx.locate(use)
    return np.unique(owner[owner >= 0]).tolist()


def _ends(ctx: ImportanceContext, g: int, outs: Sequence[ChannelUse]) -> List[int]:
    """Where (indices in ``outs``) to gate group ``g``, whose channels no gated input
    reads: the output of the depthwise conv that carries them on to no consumer (the
    channel as the rest of the model sees it, the conv's bias included), else the
    outputs of the layers that write them.

    Raises:
        ValueError: several depthwise convs carry the group (whether one feeds the
            other is not traced: gating both would count a chain twice), or no layer
            output carries it: a group no gate reaches would score 0 and be pruned
            first.
    """
    group = ctx.prunable[g]
    writers = [k for k, use in enumerate(outs) if g in _groups_of(ctx, use)]
    passing = [k for k in writers if outs[k].name in ctx.passes_on]
    if len(passing) > 1:
        names = ', '.join(sorted(outs[k].name for k in passing))
        raise ValueError(f'FisherImportance: group {group.id!r} is read only by layers that '
                         f'pass its channels on ({names}) and by no consumer after them; '
                         'whether one feeds another is not traced, so there is no one place '
                         'to gate it: keep the group whole (except_start_keys) or score it '
                         'with another criterion')
    if not writers:
        raise ValueError(f'FisherImportance: group {group.id!r} has no consumer input and no '
                         'layer output to gate: keep the group whole (except_start_keys) or '
                         'score it with another criterion')
    return passing or writers


def _entry(ctx: ImportanceContext, use: ChannelUse,
           groups: Optional[Sequence[int]]) -> Dict[int, Tuple[torch.Tensor, torch.Tensor]]:
    """Group index -> (the columns of ``use`` that carry its channels, their positions
    in the group), for ``groups`` (default every group ``use`` carries)."""
    owner, position = ctx.locate(use)
    return {g: (torch.from_numpy(np.flatnonzero(owner == g)),
                torch.from_numpy(position[owner == g]))
            for g in (_groups_of(ctx, use) if groups is None else groups)}


def _memory_per_channel(ctx: ImportanceContext) -> List[float]:
    """Activation elements (per sample) one channel of each group occupies at the
    outputs of the layers and norms that write it."""
    points = points_of(ctx, [u for u in ctx.uses if u.role in ('out', 'norm')])
    sizes: Dict[int, int] = {}

    def record(i: int, tensor: torch.Tensor) -> None:
        samples = tensor.shape[0] if tensor.dim() > 1 and points[i].dim % tensor.dim() else 1
        sizes.setdefault(i, tensor.numel() // samples // tensor.shape[points[i].dim])

    first = next(iter(ctx.batches('fisher')))
    observe(ImportanceContext(ctx.model, ctx.groups, ctx.uses, ctx.kinds, ctx.out_dims,
                              data=[first]), points, 'fisher', record)
    memory = np.zeros(len(ctx.prunable))
    for i, size in sizes.items():
        owner, _ = ctx.locate(points[i].use)
        for g in np.unique(owner[owner >= 0]).tolist():
            memory[g] += size * np.count_nonzero(owner == g) / ctx.prunable[g].num_channels
    return [float(m) if m > 0 else 1.0 for m in memory]
