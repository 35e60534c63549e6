"""Check that a model's code still runs when its groups are pruned; freeze those that fail.

Autograd cannot see how the model's code computes its reshape targets or split sizes:
``x.reshape(B, N, heads, C // heads)`` with ``C`` read from another tensor, or
``x.split(self.width, 1)``, break once channels are cut.  Before a pruner hands out its
spaces, it runs the model once on shape-only (``meta``) stand-ins of its tensors with every
group that reaches such code cut (``tracing/literal_sizes.py`` tells which; by different
fractions, so that no two agree by chance); if that fails it bisects those groups and
freezes the ones whose pruning breaks the forward, with the error as the reason.

A forward that runs can still compute something else (``view(B, self.k, -1)`` re-splits
the slim rows without failing), so on real weights ``StructurePruner`` then runs the groups
that passed masked and sliced, and freezes those whose outputs differ
(``structure.py: _freeze_inexact_groups``).
"""
import contextlib
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np
import torch
import torch.nn as nn

from ..layers import KindTable
from ..tracing import ChannelGroups, ChannelUse, FrozenReason, TracingError
from ..tracing.forward import FastMetaOps, call_model, shadow_tensors, shadowed, to_meta
from ..utils.errors import first_line
from .slicing import plan_slices
from .subnet_config import subnet_channel_config


#: The fractions of their channels the probed groups keep, in turn.  Groups cut alike can
#: agree by chance where the code ties one width to another (``C`` read from the input's
#: shape and ``qkv.reshape(B, N, 3, h, C // h)``: halving both runs, halving either one
#: alone fails), so neighbours keep different fractions.
FRACTIONS = (1 / 2, 3 / 4, 1 / 4, 5 / 8, 3 / 8)


def probe_count(num_channels: int, fraction: float) -> int:
    """The channels a probed group of ``num_channels`` keeps: ``fraction`` of them, at
    least one and at least one fewer than all.

    Example:
        >>> [probe_count(8, f) for f in FRACTIONS], probe_count(2, 3 / 4)
        ([4, 6, 2, 5, 3], 1)
    """
    return min(num_channels - 1, max(1, int(num_channels * fraction)))


class _Probe:
    """Runs the model with some groups cut (each to its fraction of :data:`FRACTIONS`,
    by its place in ``ids``) and reports the error, if any.

    The cut tensors live only inside :func:`shadowed`: the model itself is sliced for
    the length of one forward and then put back, which costs far less than a copy.
    """

    def __init__(self, model: nn.Module, groups: ChannelGroups, uses: Sequence[ChannelUse],
                 example_inputs: Any, meta: bool, ids: Sequence[str],
                 kinds: Optional[KindTable] = None):
        self.model, self.groups, self.uses, self.meta = model, groups, uses, meta
        self.kinds = kinds
        self.fractions = {gid: FRACTIONS[i % len(FRACTIONS)] for i, gid in enumerate(ids)}
        self.inputs = to_meta(example_inputs) if meta else example_inputs
        self.shadows = shadow_tensors(model, meta)

    def error(self, ids: Sequence[str]) -> Optional[str]:
        keep = {}
        for gid in ids:
            group = self.groups.groups[gid]
            keep[gid] = group.keep_best(np.arange(group.num_channels),
                                        probe_count(group.num_channels, self.fractions[gid]))
        try:
            with shadowed(self.model, self.shadows):
                cfg = subnet_channel_config(self.groups, self.uses, keep)
                for module, plan in plan_slices(self.model, cfg, self.kinds):
                    plan.apply(module)
                self.model.eval()
                with torch.no_grad(), (FastMetaOps() if self.meta else contextlib.nullcontext()):
                    call_model(self.model, self.inputs)
        except Exception as err:  # any failure means the code cannot follow the widths
            return first_line(err)
        return None


def bisect_failing(ids: List[str], error: Callable[[List[str]], Optional[str]]
                   ) -> Dict[str, str]:
    """The groups among ``ids`` for which ``error`` (of a list of group ids: a message,
    or None when they pass) reports a failure: all at once, then each half, down to
    single groups; groups that fail only together are reported together.

    Example:
        >>> bisect_failing(['a', 'b', 'c'], lambda ids: 'bad' if 'b' in ids else None)
        {'b': 'bad'}
    """
    message = error(ids)
    if message is None:
        return {}
    if len(ids) == 1:
        return {ids[0]: message}
    half = len(ids) // 2
    found = {**bisect_failing(ids[:half], error), **bisect_failing(ids[half:], error)}
    return found or {gid: message for gid in ids}  # only fail together


def freeze_failing(groups: ChannelGroups, failing: Dict[str, str], what: str, strict: bool,
                   instead: str) -> None:
    """Freeze each group of ``failing`` with ``what`` (a template of ``{error}``, the
    group's message) as the reason.

    Raises:
        TracingError: under ``strict``, for the first one, saying what to do ``instead``.
    """
    for gid, error in failing.items():
        reason = FrozenReason('runtime', gid, what.format(error=error), upstream=(gid, ))
        if strict:
            raise TracingError(f'{reason}. Use strict=False to freeze these channels instead, '
                               f'or {instead}')
        groups.groups[gid].frozen_reasons.append(reason)


def freeze_unrunnable_groups(model: nn.Module, groups: ChannelGroups,
                             uses: Sequence[ChannelUse], example_inputs: Any,
                             strict: bool = False, ids: Optional[Sequence[str]] = None,
                             kinds: Optional[KindTable] = None) -> Dict[str, str]:
    """Freeze the prunable groups whose pruning the model's code cannot follow.

    Args:
        ids: the groups to check; default the prunable groups whose channels reach code
            that may size them by hand (``groups.size_dependent``).  When there are none,
            nothing runs.
        kinds: the layer kinds the trace used (default the registered ones).

    Returns:
        ``{group id: error}`` for each group frozen.
    Raises:
        TracingError: under ``strict`` instead of freezing.
    """
    ids = list(groups.size_dependent if ids is None else ids)
    if not ids:
        return {}
    probe = _Probe(model, groups, uses, example_inputs, meta=groups.graph.device == 'meta',
                   ids=ids, kinds=kinds)
    failing = bisect_failing(ids, probe.error)
    freeze_failing(groups, failing, 'the model code fails when these channels are pruned: '
                   '{error}', strict, 'except_start_keys to exclude the module')
    return failing
