"""Whether a channel config fits a model: checked before anything is sliced or loaded.

A channel config (``tools/prune.py``'s ``channel_cfg.yaml``, a search's subnet) names, per
module and parameter, the channels a slim model keeps.  One of another architecture, or
edited by hand, would otherwise fail only at the slim model's first forward, with a shape
error deep in torch that names neither the file nor the layer, or, where the counts agree
but the channels do not, compute something else without a word.
:func:`check_channel_config` refuses it up front, naming the layer and what it expected.
"""
import itertools
from typing import Any, Optional, Union

import numpy as np
import torch.nn as nn

from ..layers import LayerKindsArg, as_table
from ..tracing import ChannelGroups, ChannelUse, build_groups, trace
from ..tracing.context import GQA_MODES, HEAD_MODES
from ..tracing.forward import shadow_tensors, shadowed
from ..utils.caller import warn_at_caller
from ..utils.errors import first_line
from .channel_config import ChannelConfig, ChannelSelection
from .masks import unmasked
from .slicing import plan_slices

__all__ = ['check_channel_config']


def check_channel_config(model: nn.Module, channel_cfg: ChannelConfig,
                         example_inputs: Any, layer_kinds: LayerKindsArg = None,
                         who: str = 'sub_model',
                         retry: str = 'if it takes other images, give sub_model their '
                                      'input_shape',
                         inputs_said: Optional[str] = None) -> None:
    """Refuse a channel config that does not fit ``model``, touching nothing.

    First what slicing checks (:func:`~razorlib.pruning.slicing.plan_slices`, planned on
    shape-only stand-ins of the weights): names the model lacks, axes a layer has not,
    widths (``raw_*_channels``) other than the layer's, a group conv's groups split.
    Then what only a trace of the forward tells (:func:`_disagreement`): channels the
    forward binds (a conv's outputs and the next layer's inputs, the branches of a
    residual sum, a layer and its norm) must be kept alike; a config that keeps other
    channels, or another count of them, in one of those layers, or leaves one out while
    another is cut, fails at the first forward or computes something else.  A config
    needs no entry for channels it does not cut.

    Attention heads may be pruned whole or in width, and grouped-query attention's query
    or key/value heads (the pruners' ``heads=`` and ``gqa=``): a config that does not
    fit the default trace of a model with attention is checked against the others
    before it is refused.  A model whose forward fails on ``example_inputs`` (sub_model's
    random ``1 x input_shape`` batch) cannot be traced: that is warned about (in the name
    of ``who``, naming the inputs as ``inputs_said``, default "a random <shape> batch",
    and saying ``retry``: how to give inputs it runs on), and only the first checks are
    made.  ``layer_kinds``: the table of layer kinds the model is sliced and traced with
    (a pruner's).

    Raises:
        ValueError: naming the module or parameter, what the config keeps there and
            what the model (or the layers bound to it) expects.

    Example (the second conv reads the first one's outputs, so it must keep their
    channels):
        >>> import torch
        >>> from razorlib.pruning import ChannelSelection
        >>> net = nn.Sequential(nn.Conv2d(3, 8, 1), nn.Conv2d(8, 4, 1))
        >>> half = ChannelSelection(8, range(4))
        >>> config = ChannelConfig(modules={'0': dict(out=half)})
        >>> check_channel_config(net, config, torch.randn(1, 3, 4, 4))
        Traceback (most recent call last):
        ...
        ValueError: modules.1 (input channels): the channel config keeps all 8 channels ...
        >>> config.modules['1'] = {'in': half}
        >>> check_channel_config(net, config, torch.randn(1, 3, 4, 4))  # fits: no error
    """
    kinds = as_table(layer_kinds)
    with shadowed(model, shadow_tensors(model, meta=True)):
        plan_slices(model, channel_cfg, kinds)
    with unmasked(model):
        try:
            graph = trace(model, example_inputs, layer_kinds=kinds)
        except Exception as err:  # pylint: disable=broad-except  # the config is not at fault
            said = inputs_said or f'a random {tuple(example_inputs.shape)} batch'
            warn_at_caller(f'{who}: the channel config is checked against the layer '
                           f'widths only: the {type(model).__name__} cannot be traced on '
                           f'{said} ({first_line(err)}), so which layers\' channels must be '
                           f'kept alike is unknown; {retry}')
            return
        problem = _disagreement(build_groups(graph), channel_cfg)
        if problem is None:
            return
        if graph.whole_heads.size:  # attention: the config may prune its heads another way
            for gqa, heads in itertools.product(GQA_MODES, HEAD_MODES):
                if (gqa, heads) != ('kv', 'whole') and _disagreement(build_groups(trace(
                        model, example_inputs, layer_kinds=kinds, gqa=gqa, heads=heads)),
                        channel_cfg) is None:
                    return
    raise ValueError(problem)


def _disagreement(groups: ChannelGroups, channel_cfg: ChannelConfig) -> Optional[str]:
    """How ``channel_cfg`` breaks the channels the trace binds, or None if it does not.

    Every traced module axis and parameter dim keeps each of its channels or not (all of
    them where the config has no entry); channels the trace binds (one class) must all
    be kept or all be pruned.  The axes the config has entries for decide first, so the
    one named is an axis left out rather than the entries that cut its channels."""
    uses = sorted(groups.uses, key=lambda use: _kept(channel_cfg, use) is None)
    if not uses:
        return None
    classes = np.concatenate([groups.labels[use.slots] for use in uses])
    kept = np.concatenate([_mask(_kept(channel_cfg, use), use.slots.size) for use in uses])
    owner = np.repeat(np.arange(len(uses)), [use.slots.size for use in uses])
    unique, first = np.unique(classes, return_index=True)
    decided = np.zeros(len(groups.labels), dtype=bool)
    decided[unique] = kept[first]
    wrong = np.nonzero(kept != decided[classes])[0]
    if not wrong.size:
        return None
    cls = classes[wrong[0]]
    bad, good = uses[owner[wrong[0]]], uses[owner[first[np.searchsorted(unique, cls)]]]
    group = next((f" (group '{gid}')" for gid, g in groups.groups.items()
                  if np.isin(cls, g.classes) or np.isin(cls, g.kept)), '')
    if good is bad:
        why = 'channels of its own that the forward binds together'
    else:
        why = (f'{_where(good)}, whose channels the forward binds to these, keeps '
               f'{_describe(_kept(channel_cfg, good), good.slots.size)}')
    return (f'{_where(bad)}: the channel config keeps '
            f'{_describe(_kept(channel_cfg, bad), bad.slots.size)}, expected '
            f'{_describe(decided[groups.labels[bad.slots]], bad.slots.size)}, as {why}{group}')


def _kept(channel_cfg: ChannelConfig, use: ChannelUse) -> Optional[ChannelSelection]:
    """The config's selection of a traced axis (None: no entry, every channel kept)."""
    if use.role == 'param':
        return channel_cfg.params.get(use.name, {}).get(use.dim)
    return channel_cfg.kept(use.name, 'in' if use.role == 'in' else 'out')


def _mask(selection: Optional[ChannelSelection], size: int) -> np.ndarray:
    """The keep-mask of a selection of ``size`` channels (None: every channel)."""
    mask = np.full(size, selection is None)
    if selection is not None:
        mask[list(selection.index)] = True
    return mask


def _where(use: ChannelUse) -> str:
    """``modules.<name> (input channels)`` or ``params.<name> (dim <d>)``."""
    if use.role == 'param':
        return f'params.{use.name} (dim {use.dim})'
    axis = {'in': 'input channels', 'out': 'output channels', 'norm': 'channels'}[use.role]
    return f'modules.{use.name} ({axis})'


def _describe(kept: Union[ChannelSelection, np.ndarray, None], size: int) -> str:
    """``'3 of 8 channels [0, 4, 5]'`` (the first 8 indices), ``'all 8 channels'`` (``'(no
    entry)'`` for None) or ``'none of its 8 channels'``, of a selection or a keep-mask."""
    if kept is None:
        return f'all {size} channels (no entry)'
    index = list(kept.index) if isinstance(kept, ChannelSelection) else \
        np.nonzero(kept)[0].tolist()
    if len(index) in (0, size):
        return f'all {size} channels' if index else f'none of its {size} channels'
    shown = ', '.join(map(str, index[:8])) + (', ...' if len(index) > 8 else '')
    return f'{len(index)} of {size} channels [{shown}]'
