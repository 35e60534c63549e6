"""Channel groups: the channels of layers that must be pruned together, as plain data.

Slots bound together form a *class* (one channel that is kept or pruned as a whole).
Classes that belong to the output of the same layer form a *group*: a residual stage, a
block's bottleneck, a concat branch.  Each group is one search space of a pruner; its
channels are its classes, in the order of its leader layer's output channels.
"""
from dataclasses import dataclass, field
from typing import Dict, List, Tuple

import numpy as np

from .context import ChannelUse
from .slots import FrozenReason, connected_labels
from .tracer import ChannelGraph

_ROLE_FIELD = {'out': 'layers', 'in': 'consumers', 'norm': 'norms', 'param': 'params'}


@dataclass
class ChannelGroup:
    """Channels pruned together.

    Args:
        id: the group's space id: the name of its leader (first traced) layer.
        num_channels: independent channels; a group conv or chunk binds several layer
            channels into one, so this can be less than the leader's width.
        width: the leader layer's output channels.
        layers: layers whose output channels belong to the group.
        consumers: layers whose input channels read (some of) the group's channels.
        norms: BN/LN/GN layers on the group's channels.
        params: bare parameters sliced with the group (layer scale, position embedding).
        frozen_reasons: why the group cannot be pruned (empty if it can).
        classes: internal class label of each channel, in channel order.
        positions: internal class label of each of the leader's output channels.

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
    classes: np.ndarray = field(default=None, repr=False)
    positions: np.ndarray = field(default=None, repr=False)

    @property
    def frozen(self) -> bool:
        return bool(self.frozen_reasons)

    @property
    def prunable(self) -> bool:
        return not self.frozen and self.num_channels > 1

    def __str__(self) -> str:
        parts = [f'{self.id}: {self.num_channels} channels'
                 + (f' (width {self.width})' if self.width != self.num_channels else '')]
        for label in ('layers', 'consumers', 'norms', 'params'):
            names = getattr(self, label)
            if names:
                parts.append(f"{label}: {', '.join(names)}")
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

    @property
    def prunable(self) -> Dict[str, ChannelGroup]:
        return {gid: g for gid, g in self.groups.items() if g.prunable}

    @property
    def size_dependent(self) -> List[str]:
        """Prunable groups whose channels reach code that may size them by hand (a view,
        split or norm whose sizes the code chose, or a size the code read).

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
        touched = np.zeros(len(self.labels), dtype=bool)
        touched[self.labels[self.graph.size_dependent]] = True
        return [gid for gid, g in self.prunable.items() if touched[g.classes].any()]

    def use_masks(self, keep: Dict[str, np.ndarray]) -> Dict[Tuple[str, str, int], np.ndarray]:
        """Boolean keep-mask of every module/parameter axis, given per-group keep masks."""
        class_keep = np.ones(len(self.labels), dtype=bool)
        for gid, mask in keep.items():
            class_keep[self.groups[gid].classes] = mask
        return {(u.name, u.role, u.dim): class_keep[self.labels[u.slots]] for u in self.uses}

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

    parts: Dict[int, List] = {}
    for source in layer_sources:
        source_labels = labels[source.start:source.start + source.size]
        parts.setdefault(int(group_of[source_labels[0]]), []).append((source, source_labels))
    groups: Dict[str, ChannelGroup] = {}
    by_label: Dict[int, ChannelGroup] = {}
    for key, members in parts.items():
        leader, leader_labels = members[0]
        merged = np.concatenate([member_labels for _, member_labels in members])
        _, first = np.unique(merged, return_index=True)
        classes = merged[np.sort(first)]
        group = ChannelGroup(leader.name, len(classes), leader.size, classes=classes,
                             positions=leader_labels)
        groups[leader.name] = by_label[key] = group

    for use in graph.uses:
        for key in np.unique(group_of[labels[use.slots]]).tolist():
            group = by_label.get(key)
            names = getattr(group, _ROLE_FIELD[use.role]) if group else None
            if names is not None and use.name not in names:
                names.append(use.name)
    for slots, reason in table.freezes:
        for key in np.unique(group_of[labels[slots]]).tolist():
            group = by_label.get(key)
            if group is not None and reason not in group.frozen_reasons:
                group.frozen_reasons.append(reason)
    return ChannelGroups(groups, labels, graph.uses, graph)
