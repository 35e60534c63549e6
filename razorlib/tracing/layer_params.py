"""A layer's own weight or bias read by ops of the model's code: tied to the layer's axes.

A layer's kind follows the op its layer runs on its weight (``ConvolutionBackward0`` of a
``Conv2d``), but the code may read the same parameter elsewhere too
(``b * self.a.bias[:, None, None]``, ``y * self.a.weight.sum()``, ``F.linear(h,
self.embed_tokens.weight)``).  Such a read gives the parameter slots of its own
(:meth:`TraceContext.leaf_channels`), which the rules bind to what it meets; pruning
slices the parameter with its layer, though, so each of those slots must stand for the
channel of the layer's axis that its dim holds, or never be pruned.  Which dim holds
which axis is the kind's knowledge: its slice plan of the layer on shape-only tensors
(:meth:`~razorlib.layers.LayerKind.plan_slice`) shows which dims shrink with each axis
(a ``Conv1D`` stores its weight ``(in, out)``, an ``nn.Embedding`` its channels on
dim 1).
"""
from typing import Dict, List, Optional

import numpy as np

from ..layers import LayerKind
from .channels import TensorChannels
from .context import ChannelUse, TraceContext
from .forward import shadow_tensors, shadowed

#: Errors a kind raises where it cannot plan the probe's slice (a depthwise conv keeps
#: its outputs with its inputs; nn.MultiheadAttention plans none; an op without a meta
#: kernel).
_PLAN_ERRORS = (ValueError, NotImplementedError, RuntimeError)


def tie_layer_params(ctx: TraceContext) -> None:
    """Bind each dim of a layer parameter that the walk gave slots to the layer's
    channels on that dim, and freeze the slots of a dim no traced axis of the layer holds
    (a kernel dim, a vocabulary, a layer never called).  Where the kind cannot say, the
    parameter's slots and the layer's channels freeze, the parameter named."""
    read = ctx.layer_params_read()
    if not read:
        return
    labels = ctx.slots.classes()
    for tensor, channels in read:
        if not channels.slots:
            continue
        for module_name, attr in ctx.owners_of(tensor):
            kind = ctx.layer_kind(module_name)
            if kind is not None:
                _tie(ctx, module_name, attr, kind, channels, labels)


def _tie(ctx: TraceContext, module_name: str, attr: str, kind: LayerKind,
         channels: TensorChannels, labels: np.ndarray) -> None:
    """Tie one owner's name of a parameter to that owner's axes."""
    name = _param_name(module_name, attr)
    try:
        axes = _dim_axes(ctx, module_name, attr, kind, labels)
    except _PLAN_ERRORS as error:
        ctx.freeze(np.concatenate([channels.all_slots()] + _own_slots(ctx, module_name, kind)),
                   'fixed', None,
                   f'the code reads it, and {type(kind).__name__} cannot say which of its '
                   f'dims hold the channels of {module_name} ({error})', op=name)
        return
    for dim, slots in channels.slots.items():
        use = axes.get(dim)
        if use is None:
            ctx.freeze(slots, 'fixed', None, f'the code reads it, and its dim {dim} holds no '
                       f'channels of {module_name} that its pruning slices', op=name)
        else:
            ctx.bind(use.slots, slots, f'{name}\'s dim {dim} holds the channels of '
                     f'{module_name}\'s {use.role} axis')


def tie_shared_layers(ctx: TraceContext) -> None:
    """Bind the axes of layers that hold one parameter: a dim of the tensor that holds
    one owner's channels is sliced with them, so it must hold the same channels of every
    other owner, or none of them may go.  BERT's masked-LM decoder holds the input
    embeddings' weight: its inputs (the prediction head's own hidden width) are bound to
    the embeddings' hidden size, which they were sliced apart from before (``slim_model``
    refused the plan).  A dim held by one owner's axis and by no traced axis of another
    (a layer never called, a vocabulary) freezes that axis, naming the other owner.
    Owners without a layer kind are left to :func:`tie_layer_params`: slicing gives them
    the sliced tensor, and their reads of it are bound there."""
    labels = None
    for owners in ctx.shared_params():
        layers = [(name, attr, kind) for name, attr in owners
                  if (kind := ctx.layer_kind(name)) is not None]
        if len({name for name, _, _ in layers}) < 2:
            continue
        labels = ctx.slots.classes() if labels is None else labels
        held = [(_param_name(name, attr), _held_axes(ctx, name, attr, kind, labels))
                for name, attr, kind in layers]
        for dim in sorted({dim for _, axes in held for dim in axes}):
            uses = [(param, axes.get(dim)) for param, axes in held]
            found = [(param, use) for param, use in uses if use is not None]
            missing = [param for param, use in uses if use is None]
            first_param, first = found[0]
            for param, use in found[1:]:
                ctx.bind(first.slots, use.slots, f'{first_param} and {param} are one tensor, '
                         f'whose dim {dim} holds the channels of both')
            if missing:
                ctx.freeze(np.concatenate([use.slots for _, use in found]), 'fixed', None,
                           f'its dim {dim} is shared with {", ".join(missing)}, which '
                           f'hold{"s" if len(missing) == 1 else ""} no channels there that '
                           'pruning slices', op=first_param)


def _held_axes(ctx: TraceContext, name: str, attr: str, kind: LayerKind,
               labels: np.ndarray) -> Dict[int, ChannelUse]:
    """:func:`_dim_axes` of one layer holding a shared parameter; none, its channels
    frozen, where its kind cannot say."""
    try:
        return _dim_axes(ctx, name, attr, kind, labels)
    except _PLAN_ERRORS:  # the kind cannot say: none of its channels may go
        own = _own_slots(ctx, name, kind)
        if own:
            ctx.freeze(np.concatenate(own), 'fixed', None,
                       f'{type(kind).__name__} cannot say which dims of this parameter, '
                       'shared with other layers, hold its channels',
                       op=_param_name(name, attr))
        return {}


def _param_name(module_name: str, attr: str) -> str:
    """``module.attr``; ``attr`` alone for the model's own parameter."""
    return f'{module_name}.{attr}' if module_name else attr


def _own_slots(ctx: TraceContext, module_name: str, kind: LayerKind) -> List[np.ndarray]:
    """The slots of each traced axis of a layer."""
    return [use.slots for axis in kind.axes
            if (use := _axis_use(ctx, module_name, axis)) is not None]


def _dim_axes(ctx: TraceContext, module_name: str, attr: str, kind: LayerKind,
              labels: np.ndarray) -> Dict[int, ChannelUse]:
    """Dim of the layer's ``attr`` -> the traced axis whose channels it holds one to one.

    For each axis the kind plans a slice of the layer (its tensors shape-only, ``meta``,
    meanwhile) that drops the channels of one class of slots (one position of every group
    of a group conv, which must keep the same positions in each); a dim that shrinks to
    the kept count holds that axis.
    """
    module = ctx.modules[module_name]
    shape = tuple(getattr(module, attr).shape)
    axes: Dict[int, ChannelUse] = {}
    with shadowed(module, shadow_tensors(module, meta=True)):  # plans copy no weight
        for axis in kind.axes:
            use = _axis_use(ctx, module_name, axis)
            if use is None:  # never traced: the layer's pruning does not slice it
                continue
            kept = np.flatnonzero(labels[use.slots] != labels[use.slots[-1]]).tolist()
            plan = kind.plan_slice(module_name, module, {axis: kept})
            sliced = plan.params.get(attr, plan.buffers.get(attr))
            if sliced is None:
                continue
            for dim, (before, after) in enumerate(zip(shape, sliced.shape)):
                if before == len(use.slots) and after == len(kept) and before != after:
                    axes[dim] = use
    return axes


def _axis_use(ctx: TraceContext, module_name: str, axis: str) -> Optional[ChannelUse]:
    """The traced channels of a layer's axis (a norm records its ``out`` as ``norm``)."""
    roles = ('out', 'norm') if axis == 'out' else (axis, )
    for role in roles:
        use = ctx.uses.get((module_name, role, 0))
        if use is not None:
            return use
    return None
