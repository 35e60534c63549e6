"""Channel groups: the channels of layers that must be pruned together, as plain data.

Slots bound together form a *class* (one channel that is kept or pruned as a whole).
Classes that belong to the output of the same layer form a *group*: a residual stage, a
block's bottleneck, a concat branch.  Each group is one search space of a pruner; its
channels are its classes, in the order of its leader layer's output channels.  Classes
an option or op keeps whole (``gqa='query'``'s key/value heads, the channels a roll
wraps around; reason kind :data:`~.slots.KEPT`) leave a group that nothing else freezes:
they stay whole and the rest prunes (the query heads of a fused q/k/v projection).
"""
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import numpy as np

from .context import ChannelUse
from .slots import KEPT, STRICT_KINDS, FrozenReason, connected_labels
from .tracer import ChannelGraph

_ROLE_FIELD = {'out': 'layers', 'in': 'consumers', 'norm': 'norms', 'param': 'params'}
_ROLE_AXIS = {'out': 'output channels', 'in': 'input channels', 'norm': 'channels',
              'param': 'channels'}


@dataclass
class ChannelGroup:
    """Channels pruned together.

    Args:
        id: the group's space id: the name of its leader (first traced) layer.
        num_channels: independent channels; a group conv or chunk binds several layer
            channels into one, so this can be less than the leader's width.
        width: the leader layer's output channels (those it keeps whole too).
        layers: layers whose output channels belong to the group.
        consumers: layers whose input channels read (some of) the group's channels.
        norms: BN/LN/GN layers on the group's channels.
        params: bare parameters sliced with the group (layer scale, position embedding).
        frozen_reasons: why the group cannot be pruned (empty if it can).
        kept_reasons: why the channels of ``kept`` stay whole while the others prune
            (reasons of kind :data:`~.slots.KEPT`; empty if none do).
        classes: internal class label of each channel, in channel order.
        kept: internal class labels of the leader's output channels that are no channels
            of the group: always kept, never in a mask (a fused projection's key/value
            heads under ``gqa='query'``, the channels a roll wraps around).
        positions: internal class label of each of the leader's output channels (one of
            ``classes`` or ``kept``).
        parts: ``(what, channel indices)`` of which a subnet must keep at least one
            channel each: a layer of a merged group (a concat of two convs, chunked, binds
            their channels, and keeping only one conv's would leave the other with none),
            the input of a chunk.  Sets that span the whole group are left out.

    Example:
        >>> print(group)  # doctest: +SKIP
        layer1.0.conv1: 64 channels; layers: layer1.0.conv1; consumers: layer1.0.conv2; ...
    """
    id: str
    num_channels: int
    width: int
    layers: List[str] = field(default_factory=list)
    consumers: List[str] = field(default_factory=list)
    norms: List[str] = field(default_factory=list)
    params: List[str] = field(default_factory=list)
    frozen_reasons: List[FrozenReason] = field(default_factory=list)
    kept_reasons: List[FrozenReason] = field(default_factory=list)
    classes: np.ndarray = field(default=None, repr=False)
    kept: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64), repr=False)
    positions: np.ndarray = field(default=None, repr=False)
    parts: List[Tuple[str, np.ndarray]] = field(default_factory=list, repr=False)

    @property
    def frozen(self) -> bool:
        return bool(self.frozen_reasons)

    @property
    def prunable(self) -> bool:
        return not self.frozen and self.num_channels > 1

    def keep_best(self, order: np.ndarray, count: int) -> np.ndarray:
        """Keep-mask of ``count`` channels (at least 1), best first by ``order``, with at
        least one channel in every part.

        The first ``count`` of ``order`` are taken; a part left without a channel gets its
        best one, and the worst taken channels that no part needs are given back, so the
        mask keeps exactly ``count`` channels unless the parts need more.

        Args:
            order: every channel index, most worth keeping first.
            count: how many channels to keep.

        Example:
            >>> group = ChannelGroup('a', 4, 4, parts=[('conv b', np.array([2, 3]))])
            >>> group.keep_best(np.arange(4), 2).nonzero()[0].tolist()
            [0, 2]
        """
        n = self.num_channels
        count = min(max(1, int(count)), n)
        keep = np.zeros(n, dtype=bool)
        keep[order[:count]] = True
        if not self.parts:
            return keep
        rank = np.empty(n, dtype=np.int64)
        rank[order] = np.arange(n)
        members = np.zeros((len(self.parts), n), dtype=bool)
        for i, (_, index) in enumerate(self.parts):
            members[i, index] = True
        hits = (members & keep).sum(1)
        kept = count
        for i, (_, index) in enumerate(self.parts):
            if not hits[i]:
                best = index[np.argmin(rank[index])]
                keep[best] = True
                hits += members[:, best]
                kept += 1
        for channel in order[::-1]:
            if kept <= count:
                break
            if keep[channel] and (hits[members[:, channel]] > 1).all():
                keep[channel] = False
                hits -= members[:, channel]
                kept -= 1
        return keep

    def __str__(self) -> str:
        parts = [f'{self.id}: {self.num_channels} channels'
                 + (f' (width {self.width})' if self.width != self.num_channels else '')]
        for label in ('layers', 'consumers', 'norms', 'params'):
            names = getattr(self, label)
            if names:
                parts.append(f"{label}: {', '.join(names)}")
        if self.kept_reasons:
            kept = int(np.isin(self.positions, self.kept).sum())
            parts.append(f'keeps {kept} of its {self.width} output channels whole: '
                         + '; '.join(str(r) for r in self.kept_reasons))
        if self.frozen:
            parts.append('FROZEN: ' + '; '.join(str(r) for r in self.frozen_reasons))
        return '; '.join(parts)


@dataclass
class ChannelGroups:
    """All groups of a traced model and the slot labels that map them onto modules."""
    groups: Dict[str, ChannelGroup]
    labels: np.ndarray
    uses: List[ChannelUse]
    graph: ChannelGraph
    _needed: Optional[Tuple] = field(default=None, init=False, repr=False)

    @property
    def prunable(self) -> Dict[str, ChannelGroup]:
        return {gid: g for gid, g in self.groups.items() if g.prunable}

    @property
    def size_dependent(self) -> List[str]:
        """Prunable groups whose channels reach code that may size them by hand (a view,
        split or norm whose sizes the code chose, or a size the code read), or that a call
        reads outside autograd (``detach()``, an op under ``no_grad``).

        Example:
            >>> import torch, torch.nn as nn
            >>> from razorlib.tracing import build_groups, trace
            >>> class Net(nn.Module):
            ...     def __init__(self):
            ...         super().__init__()
            ...         self.a, self.b = nn.Conv2d(3, 8, 1), nn.Conv2d(8, 4, 1)
            ...     def forward(self, x):
            ...         return self.b(self.a(x).view(1, 8, -1).unsqueeze(-1))
            >>> build_groups(trace(Net(), torch.randn(1, 3, 4, 4))).size_dependent
            ['a']
        """
        return self._touching(self.graph.size_dependent)

    @property
    def whole_heads(self) -> List[str]:
        """Prunable groups whose channels attention reads as whole heads: a code that
        splits them by a head count of its own (``reshape(B, N, self.h, -1)``) would
        re-split the slim model's heads without failing (``graph.whole_heads``)."""
        return self._touching(self.graph.whole_heads)

    @property
    def summed(self) -> List[str]:
        """Prunable groups whose channels a sum or a product of activations adds up
        over: dropping their terms is exact only where the masked model's pruned channels
        are zero at the sum, which an op after the layer can undo (``y.exp().sum(1)``)
        (``graph.summed``)."""
        return self._touching(self.graph.summed)

    @property
    def sliced(self) -> List[str]:
        """Prunable groups whose channels a slice reads at bounds the code computes: the
        slim slice takes the same channels only where those bounds follow the slim widths
        (``graph.sliced``)."""
        return self._touching(self.graph.sliced)

    def _touching(self, slots: np.ndarray) -> List[str]:
        """Prunable groups with a class that holds any of ``slots``."""
        touched = np.zeros(len(self.labels), dtype=bool)
        touched[self.labels[slots]] = True
        return [gid for gid, g in self.prunable.items() if touched[g.classes].any()]

    def use_masks(self, keep: Dict[str, np.ndarray]) -> Dict[Tuple[str, str, int], np.ndarray]:
        """Boolean keep-mask of every module/parameter axis, given per-group keep masks."""
        class_keep = self._class_keep(keep)
        return {(u.name, u.role, u.dim): class_keep[self.labels[u.slots]] for u in self.uses}

    def check_keep(self, keep: Dict[str, np.ndarray]) -> None:
        """Raise if per-group keep masks leave a layer axis or a chunk input with no channel.

        Args:
            keep: a boolean mask over each named group's channels; groups not named keep
                all of theirs.

        Raises:
            ValueError: naming the space(s), the layer or op left empty and what to do.
        """
        if self._needed is None:
            # chunk inputs first: an empty one also empties a layer, but names the cause
            needed = [(slots, what, 'each piece') for slots, what in self.graph.slots.required]
            needed += [(u.slots, f'{u.name} ({_ROLE_AXIS[u.role]})', 'a layer')
                       for u in self.uses if u.slots.size]
            sizes = [len(slots) for slots, _, _ in needed]
            starts = np.cumsum([0] + sizes[:-1])
            flat = np.concatenate([slots for slots, _, _ in needed] or [np.zeros(0, int)])
            self._needed = (needed, self.labels[flat], starts)
        needed, flat_labels, starts = self._needed
        if not needed:
            return
        kept = np.logical_or.reduceat(self._class_keep(keep)[flat_labels], starts)
        for i in np.nonzero(~kept)[0][:1].tolist():
            slots, what, needs = needed[i]
            cls = self.labels[slots]
            spaces = [gid for gid in keep if np.isin(cls, self.groups[gid].classes).any()]
            names = ', '.join(repr(gid) for gid in spaces)
            raise ValueError(f'space {names}: the subnet keeps no channel of {what}, but '
                             f'{needs} needs at least one; keep one of its channels')

    def _class_keep(self, keep: Dict[str, np.ndarray]) -> np.ndarray:
        class_keep = np.ones(len(self.labels), dtype=bool)
        for gid, mask in keep.items():
            class_keep[self.groups[gid].classes] = mask
        return class_keep

    def strict_reasons(self) -> Dict[str, List[str]]:
        """Why groups were left unpruned where ``strict=True`` would have raised instead.

        Returns:
            one line per reason (an op missing from the rule table, a shape a rule cannot
            explain, code that fails when the channels are cut or reads a parameter
            outside autograd) -> the ids of the groups of more than one channel it froze.

        Example:
            >>> import torch, torch.nn as nn
            >>> from razorlib.tracing import build_groups, trace
            >>> class Net(nn.Module):
            ...     def __init__(self):
            ...         super().__init__()
            ...         self.a, self.b = nn.Conv2d(3, 8, 1), nn.Conv2d(8, 4, 1)
            ...     def forward(self, x):
            ...         return self.b(torch.fft.rfft2(self.a(x)).abs())
            >>> build_groups(trace(Net(), torch.randn(1, 3, 4, 4))).strict_reasons()
            {'[unknown-op] FftR2CBackward0: this grad_fn is not in the channel rule table; \
after a; before b': ['a']}
        """
        found: Dict[str, List[str]] = {}
        for gid, group in self.groups.items():
            if group.num_channels < 2:
                continue
            for reason in group.frozen_reasons:
                if reason.kind in STRICT_KINDS:
                    found.setdefault(str(reason), []).append(gid)
        return found

    def report(self) -> str:
        """Readable list of groups, prunable first, then frozen ones with their reasons."""
        lines = ['prunable groups:']
        lines += [f'  {g}' for g in self.groups.values() if g.prunable]
        lines.append('not prunable:')
        lines += [f'  {g}' for g in self.groups.values() if not g.prunable]
        if self.graph.untraced:
            lines.append('modules that did not run during tracing (left untouched): '
                         + ', '.join(self.graph.untraced))
        return '\n'.join(lines)


def build_groups(graph: ChannelGraph) -> ChannelGroups:
    """Resolve a trace's bindings into classes and its layers' classes into groups."""
    table = graph.slots
    labels = table.classes()
    layer_sources = [s for s in table.sources if s.kind == 'layer']
    # Second level: classes of the same layer output belong to the same group.
    edges_a, edges_b = [], []
    for source in layer_sources:
        source_labels = labels[source.start:source.start + source.size]
        edges_a.append(np.full(source.size - 1, source_labels[0]))
        edges_b.append(source_labels[1:])
    group_of = connected_labels(table.size, np.concatenate(edges_a or [np.zeros(0, int)]),
                                np.concatenate(edges_b or [np.zeros(0, int)]))

    members_of: Dict[int, List] = {}
    for source in layer_sources:
        source_labels = labels[source.start:source.start + source.size]
        members_of.setdefault(int(group_of[source_labels[0]]), []).append((source,
                                                                           source_labels))
    groups: Dict[str, ChannelGroup] = {}
    by_label: Dict[int, ChannelGroup] = {}
    for key, members in members_of.items():
        leader, leader_labels = members[0]
        merged = np.concatenate([member_labels for _, member_labels in members])
        _, first = np.unique(merged, return_index=True)
        classes = merged[np.sort(first)]
        group = ChannelGroup(leader.name, len(classes), leader.size, classes=classes,
                             positions=leader_labels)
        groups[leader.name] = by_label[key] = group

    group_labels = group_of[labels]
    for use, keys in zip(graph.uses, _keys_of([u.slots for u in graph.uses], group_labels)):
        for key in keys:
            group = by_label.get(key)
            names = getattr(group, _ROLE_FIELD[use.role]) if group else None
            if names is not None and use.name not in names:
                names.append(use.name)
    for (_, reason), keys in zip(table.freezes,
                                 _keys_of([slots for slots, _ in table.freezes], group_labels)):
        for key in keys:
            group = by_label.get(key)
            if group is not None and reason not in group.frozen_reasons:
                group.frozen_reasons.append(reason)
    kept = _kept_classes(graph, labels)
    for group in groups.values():
        _leave_out_kept(group, kept)
    _add_parts(graph, labels, group_of, members_of, by_label)
    return ChannelGroups(groups, labels, graph.uses, graph)


def _kept_classes(graph: ChannelGraph, labels: np.ndarray) -> np.ndarray:
    """Whether each class holds a slot that a reason of kind :data:`~.slots.KEPT` froze."""
    kept = np.zeros(len(labels), dtype=bool)
    for slots, reason in graph.slots.freezes:
        if reason.kind == KEPT:
            kept[labels[slots]] = True
    return kept


def _leave_out_kept(group: ChannelGroup, kept: np.ndarray) -> None:
    """Take the classes ``kept`` marks out of ``group`` where that is all that freezes it.

    ``gqa='query'`` keeps key/value heads whole; in a fused projection (GPTBigCode's
    multi-query ``c_attn``, Phi-3's ``qkv_proj``) they are outputs of the layer that
    computes the queries, so they would freeze its whole group.  Left out, they are
    always kept and the query heads prune.  A group frozen for any other reason stays
    frozen, and so does one with fewer than two other channels (it could not prune).
    """
    if not group.frozen_reasons or any(r.kind != KEPT for r in group.frozen_reasons):
        return
    whole = kept[group.classes]
    if np.count_nonzero(~whole) < 2:
        return
    group.kept, group.classes = group.classes[whole], group.classes[~whole]
    group.num_channels = len(group.classes)
    group.kept_reasons, group.frozen_reasons = group.frozen_reasons, []


def _keys_of(slot_sets: List[np.ndarray], group_labels: np.ndarray) -> List[List[int]]:
    """The sorted distinct group labels of each slot set, in one vectorised pass (one
    ``np.unique`` per set costs more than the rest of the grouping)."""
    if not slot_sets:
        return []
    sizes = np.array([len(slots) for slots in slot_sets])
    owner = np.repeat(np.arange(len(slot_sets)), sizes)
    width = len(group_labels) + 1
    pairs = np.sort(owner * width + group_labels[np.concatenate(slot_sets)])
    pairs = pairs[np.concatenate(([True], pairs[1:] != pairs[:-1]))] if len(pairs) else pairs
    keys: List[List[int]] = [[] for _ in slot_sets]
    for index, key in zip((pairs // width).tolist(), (pairs % width).tolist()):
        keys[index].append(key)
    return keys


def _add_parts(graph: ChannelGraph, labels: np.ndarray, group_of: np.ndarray,
               members_of: Dict[int, List], by_label: Dict[int, ChannelGroup]) -> None:
    """Give each group the channel sets inside it that must keep a channel each.

    In a group of one layer every channel is that layer's; consumers, norms and chunk
    pieces read all of them or a union of layers' channels.  So only the layers of a
    group of several (which a chunk or a group conv over their concat may bind in part)
    and chunk inputs are looked at.  A set that reaches into another group is left to
    :meth:`ChannelGroups.check_keep`.  The classes a group keeps whole (``kept``) are no
    channels of it: a set that holds one always keeps a channel.
    """
    needed = []  # chunk inputs first: a layer with the same channels is named by them
    for slots, what in graph.slots.required:
        keys = np.unique(group_of[labels[slots]])
        if len(keys) == 1 and int(keys[0]) in by_label:
            needed.append((by_label[int(keys[0])], labels[slots], what))
    for key, members in members_of.items():
        if len(members) > 1:
            needed += [(by_label[key], member_labels, source.name)
                       for source, member_labels in members]
    position = np.full(len(labels), -1, dtype=np.int64)
    for group in {id(group): group for group, _, _ in needed}.values():
        position[group.classes] = np.arange(group.num_channels)
    seen = set()
    for group, cls, what in needed:
        if (position[cls] < 0).any():  # a class it keeps whole
            continue
        present = np.zeros(group.num_channels, dtype=bool)
        present[position[cls]] = True
        index = np.nonzero(present)[0]
        if len(index) < group.num_channels and (group.id, index.tobytes()) not in seen:
            seen.add((group.id, index.tobytes()))
            group.parts.append((what, index))
