"""Importance criteria: a score per channel of each prunable group, read from every
layer the group couples.

A criterion scores the channels of each prunable group (higher: more worth keeping) in
three steps:

1. **per use**: every axis that carries the group's channels (a producer's output
   filters, a norm, a consumer's input columns, a bare parameter such as a layer scale)
   gives a local score to each of its channels (:meth:`Importance.use_scores`);
2. **reduction** over the uses (``reduction``): a group channel's local scores are
   summed, averaged or maxed;
3. **normalisation** per group (``normalize``): none, divided by the group's mean or max,
   or LAMP, so that the channels of different groups can be ranked together.

Weights are read only through :meth:`LayerKind.channel_weights
<razorlib.layers.LayerKind.channel_weights>` (and the bare-parameter helper), so a new
layer kind is scored by every criterion.
"""
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import (Any, Callable, Dict, FrozenSet, Iterable, Iterator, List, Mapping, Optional,
                    Sequence, Tuple, Union)

import numpy as np
import torch
import torch.nn as nn

from ...layers import KindTable, as_table, param_channel_weights
from ...registry import IMPORTANCES
from ...tracing import ChannelGroup, ChannelGroups
from ...tracing.context import ChannelUse
from ...utils.checks import check_options
from ..data import Batch, batch_loss, pair_batches

__all__ = ['Importance', 'ImportanceContext', 'ImportanceArg', 'build_importance',
           'NORMALIZERS', 'REDUCTIONS', 'lamp']

#: A use's role -> the axis of its layer kind that carries the channels.
ROLE_AXIS = {'in': 'in', 'out': 'out', 'norm': 'out'}
ALL_ROLES = ('in', 'out', 'norm', 'param')


def lamp(scores: np.ndarray) -> np.ndarray:
    """LAMP (Lee et al., 2021): each score over the sum of the scores not below it.

    The group's best channel gets 1; a channel weak beside many stronger ones gets
    little, whatever the group's scale.  Ties get the same value.

    It runs on the criterion's scores as they are.  Lee et al. (and Torch-Pruning's
    ``LAMPImportance``) run it on squared weight magnitudes, while ``l2``'s scores are
    norms, their square roots: a group's order is the same, but across groups the two
    can rank channels otherwise.  A criterion whose ``row_scores`` squares
    (``rows.pow(2).sum(1)``, an :class:`~.magnitude.L2Importance` subclass) feeds it
    squared magnitudes, as the paper does.

    Example:
        >>> lamp(np.array([1., 3., 2., 2.])).round(3).tolist()
        [0.125, 1.0, 0.286, 0.286]

        The first channel of group ``a`` (L2 norms) ranks below group ``b``'s first;
        squared, above it:

        >>> a, b = np.array([1.0, 1.01, 1.02]), np.array([1.0, 1.9])
        >>> bool(lamp(a)[0] < lamp(b)[0]), bool(lamp(a ** 2)[0] < lamp(b ** 2)[0])
        (True, False)
    """
    ascending = np.sort(scores)
    suffix = np.cumsum(ascending[::-1])[::-1]  # suffix[i] = sum of ascending[i:]
    denom = suffix[np.searchsorted(ascending, scores, side='left')]
    return np.divide(scores, denom, out=np.zeros_like(scores, dtype=float), where=denom > 0)


def _divide_by(scale: float, scores: np.ndarray) -> np.ndarray:
    return scores / scale if scale > 0 else scores


#: Per-group normalisation: name -> function of the group's scores.
NORMALIZERS: Dict[str, Callable[[np.ndarray], np.ndarray]] = {
    'none': lambda s: s,
    'mean': lambda s: _divide_by(float(np.mean(s)), s),
    'max': lambda s: _divide_by(float(np.max(s)), s),
    'lamp': lamp,
}

#: Reduction over a channel's uses: name -> (numpy ufunc accumulating, initial value).
REDUCTIONS: Dict[str, Tuple[np.ufunc, float]] = {
    'sum': (np.add, 0.0),
    'mean': (np.add, 0.0),
    'max': (np.maximum, -np.inf),
}


@dataclass
class ImportanceContext:
    """What a criterion reads: a traced model, its groups and, for the criteria that
    need them, batches and a loss.

    Args:
        model: the model the pruner traced (masked, usually at full width).
        groups: its channel groups.
        uses: the module/parameter axes that carry prunable channels.
        kinds: the layer kinds in force.
        out_dims: module name -> the (negative) dim of its output holding its channels.
        data: an iterable of ``(inputs, targets)`` batches (data-driven criteria); a
            one-shot iterator is read into a list.
        loss_fn: ``loss_fn(outputs, targets)``; default cross-entropy.
        measure: exact FLOPs/params of a subnet dict (keep-masks per group id), for
            criteria normalised by cost (GroupFisher).
        subnet: the keep-masks as they stand (group id -> one bool per channel); a group
            it leaves out, or all of them when None, is at full width.
    """
    model: nn.Module
    groups: ChannelGroups
    uses: Sequence[ChannelUse]
    kinds: KindTable = field(default_factory=lambda: as_table(None))
    out_dims: Dict[str, int] = field(default_factory=dict)
    data: Optional[Iterable[Batch]] = None
    loss_fn: Optional[Callable[[Any, Any], torch.Tensor]] = None
    measure: Optional[Callable[[Dict[str, np.ndarray]], Any]] = None
    subnet: Optional[Dict[str, np.ndarray]] = None

    def __post_init__(self) -> None:
        # a one-shot iterator: criteria may read it twice (asking a DataLoader or checked
        # batches for an iterator to tell would start a pass, and its workers, for nothing)
        if isinstance(self.data, Iterator):
            self.data = list(self.data)

    @classmethod
    def from_pruner(cls, pruner: Any, **kwargs: Any) -> 'ImportanceContext':
        """The context of a prepared :class:`~razorlib.pruning.StructurePruner`."""
        groups = pruner._require_prepared()
        subnet = {gid: keep.numpy() for gid, keep in pruner.current_subnet.items()}
        return cls(pruner.model, groups, pruner._uses, pruner.kinds, groups.graph.out_dims,
                   subnet=subnet, **kwargs)

    def keep_masks(self) -> Dict[str, np.ndarray]:
        """Every prunable group's keep-mask as it stands (all ones where :attr:`subnet`
        says nothing)."""
        subnet = self.subnet or {}
        return {g.id: np.asarray(subnet.get(g.id, np.ones(g.num_channels)), dtype=bool)
                for g in self.prunable}

    @cached_property
    def modules(self) -> Dict[str, nn.Module]:
        return dict(self.model.named_modules())

    @cached_property
    def prunable(self) -> List[ChannelGroup]:
        return list(self.groups.prunable.values())

    @cached_property
    def _index(self) -> Tuple[np.ndarray, np.ndarray]:
        owner = np.full(len(self.groups.labels), -1, dtype=np.int64)
        position = np.full(len(self.groups.labels), -1, dtype=np.int64)
        for i, group in enumerate(self.prunable):
            owner[group.classes] = i
            position[group.classes] = np.arange(group.num_channels)
        return owner, position

    def locate(self, use: ChannelUse) -> Tuple[np.ndarray, np.ndarray]:
        """For each channel of ``use``'s axis: the index (in :attr:`prunable`) of the
        group it belongs to (-1: none prunable) and its channel in that group."""
        owner, position = self._index
        cls = self.groups.labels[use.slots]
        return owner[cls], position[cls]

    def channels(self, use: ChannelUse) -> Tuple[ChannelUse, np.ndarray]:
        """``use`` with one slot per channel it carries, and for each of its slots the
        index of that channel in it.

        A channel may own several slots of one axis: the H*W columns a Linear after a
        flatten reads it through, the slots a group conv or a chunk binds, a depthwise
        conv's ``m`` outputs.  Reading it there is still one use: its weights there are
        scored together and it counts once in a ``mean`` or ``max`` over uses.
        """
        _, first, inverse = np.unique(self.groups.labels[use.slots], return_index=True,
                                      return_inverse=True)
        return replace(use, slots=use.slots[first]), inverse.reshape(-1)

    @cached_property
    def passes_on(self) -> FrozenSet[str]:
        """The layers whose output carries their input's channels on, slot for slot (a
        depthwise conv, whose kind traces its outputs onto its input's slots).

        Their input and output uses are one set of weights on one channel, and the
        channel is read at the next layer's input.  A dense layer whose output a residual
        add binds to its input (``y = a + conv(a)``) writes slots of its own: it is not
        one of them.
        """
        inputs = {u.name: u.slots for u in self.uses if u.role == 'in'}
        return frozenset(u.name for u in self.uses if u.role == 'out' and u.name in inputs
                         and np.isin(u.slots, inputs[u.name]).all())

    def weights(self, use: ChannelUse) -> Optional[torch.Tensor]:
        """``(channels, n)``: the weights each channel of ``use``'s axis owns, read
        through its layer kind (None if the kind says no weights for that axis)."""
        if use.role == 'param':
            owner, _, attr = use.name.rpartition('.')
            return param_channel_weights(getattr(self.modules[owner], attr), use.dim)
        module = self.modules[use.name]
        kind = self.kinds.kind_of(module)
        try:
            return kind.channel_weights(module, ROLE_AXIS[use.role])
        except NotImplementedError:
            return None

    def batches(self, criterion: str) -> Iterator[Batch]:
        """The ``(inputs, targets)`` batches of :attr:`data`, checked
        (:func:`~razorlib.pruning.data.pair_batches`)."""
        return iter(pair_batches(self.data, f'importance {criterion!r}'))

    def loss(self, outputs: Any, targets: Any, criterion: str,
             index: Optional[int] = None) -> torch.Tensor:
        """``loss_fn(outputs, targets)`` for ``criterion`` on data batch ``index``, refused
        unless one finite number (:func:`~razorlib.pruning.data.batch_loss`); the messages
        name the batch, so that a NaN in one of many batches can be found."""
        where = '' if index is None else f' on batch {index}'
        return batch_loss(self.loss_fn, outputs, targets, f'importance {criterion!r}', where)


class Importance:
    """Base class of importance criteria; subclasses give :meth:`use_scores`.

    Args:
        reduction: how a channel's local scores over the group's uses combine:
            ``'sum'``, ``'mean'`` or ``'max'``.
        normalize: per-group normalisation: ``'none'``, ``'mean'``, ``'max'`` or
            ``'lamp'``; default the criterion's :attr:`default_normalize`.  Every one of
            them keeps a group's order, so it only matters for global ranking.
        roles: the uses read: ``'in'`` (consumers' input columns), ``'out'``
            (producers' output filters), ``'norm'`` (norms), ``'param'`` (bare
            parameters); default the criterion's :attr:`roles`.

    Calling a criterion on an :class:`ImportanceContext` returns ``{group id: scores}``
    for each prunable group it could score (a group none of whose uses it reads, such as
    a group without a norm for ``bn_scale``, is left out: pruners keep it whole).
    """
    #: The uses read unless ``roles=`` says otherwise.
    roles: Tuple[str, ...] = ('in', 'out')
    #: Whether the criterion runs the model on ``data``.
    needs_data: bool = False
    #: Whether it scores by the loss of ``data`` (gradients), so needs its targets; the
    #: other data criteria read the inputs only.
    needs_loss: bool = False
    default_normalize: str = 'mean'
    #: The arguments ``repr`` shows, as attributes of the same names.
    shown: Tuple[str, ...] = ('reduction', 'normalize', 'roles')

    def __init__(self, reduction: str = 'sum', normalize: Optional[str] = None,
                 roles: Union[Sequence[str], str, None] = None):
        if reduction not in REDUCTIONS:
            raise ValueError(f'{type(self).__name__}: reduction {reduction!r} is not one of '
                             f'{sorted(REDUCTIONS)}')
        normalize = self.default_normalize if normalize is None else normalize
        if normalize not in NORMALIZERS:
            raise ValueError(f'{type(self).__name__}: normalize {normalize!r} is not one of '
                             f'{sorted(NORMALIZERS)}')
        roles = ALL_ROLES if roles == 'all' else (type(self).roles if roles is None else roles)
        roles = (roles, ) if isinstance(roles, str) else tuple(roles)
        unknown = [r for r in roles if r not in ALL_ROLES]
        if unknown:
            raise ValueError(f'{type(self).__name__}: unknown role {unknown[0]!r}; roles are '
                             f'{ALL_ROLES} or "all"')
        if not roles:  # it would score nothing: every group kept whole, or a data
            # criterion refusing the batches as if they did not fit the model
            raise ValueError(f'{type(self).__name__}: roles is empty, so it reads no weight '
                             f'or tensor; give some of {ALL_ROLES} or "all"')
        self.reduction, self.normalize, self.roles = reduction, normalize, roles

    def __repr__(self) -> str:
        shown = ', '.join(f'{name}={getattr(self, name)!r}' for name in self.shown)
        return f'{type(self).__name__}({shown})'

    def __call__(self, ctx: ImportanceContext) -> Dict[str, np.ndarray]:
        raw = self.aggregate(ctx, self.use_scores(ctx))
        return {gid: NORMALIZERS[self.normalize](scores) for gid, scores in raw.items()}

    def use_scores(self, ctx: ImportanceContext) -> Iterable[Tuple[ChannelUse, np.ndarray]]:
        """``(use, local score per channel of the use's axis)`` for the uses read."""
        raise NotImplementedError

    def uses(self, ctx: ImportanceContext) -> List[ChannelUse]:
        """The context's uses in :attr:`roles`."""
        return [use for use in ctx.uses if use.role in self.roles]

    def aggregate(self, ctx: ImportanceContext,
                  local: Iterable[Tuple[ChannelUse, np.ndarray]]) -> Dict[str, np.ndarray]:
        """Combine local scores into one score per group channel with :attr:`reduction`;
        a channel no use scored gets 0, a group no use reached is left out.

        A channel's slots within one use are one use (:meth:`ImportanceContext.channels`):
        scores still given per slot are added up, so a criterion whose score does not add
        over slots (an L2 norm, a mean, the absolute value of a sum) merges them first.
        """
        ufunc, initial = REDUCTIONS[self.reduction]
        totals = [np.full(g.num_channels, initial) for g in ctx.prunable]
        counts = [np.zeros(g.num_channels) for g in ctx.prunable]
        for use, scores in local:
            use, inverse = ctx.channels(use)
            scores = np.bincount(inverse, np.asarray(scores, dtype=float).reshape(-1),
                                 len(use.slots))
            owner, position = ctx.locate(use)
            for i in np.unique(owner[owner >= 0]).tolist():
                hit = owner == i
                ufunc.at(totals[i], position[hit], scores[hit])
                np.add.at(counts[i], position[hit], 1)
        result = {}
        for group, total, count in zip(ctx.prunable, totals, counts):
            if not count.any():
                continue
            total = np.where(count > 0, total, 0.0)
            if self.reduction == 'mean':
                total = total / np.maximum(count, 1)
            result[group.id] = total
        return result


ImportanceArg = Union[str, dict, Importance]


def build_importance(importance: ImportanceArg) -> Importance:
    """A criterion from a registered name (``'l1'``, ``'L1Importance'``), a config dict
    (``dict(type='taylor', normalize='lamp')``) or an instance.

    Example:
        >>> build_importance(dict(type='l2', reduction='max'))
        L2Importance(reduction='max', normalize='mean', roles=('in', 'out'), norm_scales=True)
    """
    if isinstance(importance, Importance):
        return importance
    known = sorted(k for k in IMPORTANCES.module_dict if k.islower())
    if not isinstance(importance, (str, Mapping)):
        raise TypeError(f'importance: a registered name ({", ".join(known)}), a config dict '
                        f"(dict(type='l2', normalize='lamp')) or an Importance, got "
                        f'{importance!r} ({type(importance).__name__})')
    cfg = dict(type=importance) if isinstance(importance, str) else dict(importance)
    name = cfg.pop('type', None)
    if name is None:  # the registry's own error names neither the option nor the names
        raise KeyError(f"importance config {dict(importance)!r} has no 'type'; known: {known}")
    if isinstance(name, str) and IMPORTANCES.get(name) is None:
        raise KeyError(f'importance {name!r} is not registered; known: {known}')
    cls = IMPORTANCES.get(name) if isinstance(name, str) else name
    if isinstance(cls, type):
        check_options(cls, cfg, 'importance', through_bases=True)
    return IMPORTANCES.build(dict(type=name, **cfg))
