"""Channel rules for parametric layers: conv, linear, embedding and normalisation.

A layer is recognised by the module that owns the weight leaf of its grad_fn (or, for a
norm without affine parameters, by the module whose forward returned the node), so
``ConvolutionBackward0`` is told apart as Conv1d/2d/3d or ConvTranspose by the module.
A layer op whose weight belongs to no known module is treated as channel mixing.
"""
from typing import Optional, Sequence, Tuple

import numpy as np
import torch.nn as nn

from .basic_rules import Outputs, matmul, mixing, pass_through
from .channels import InputInfo, TensorChannels
from .context import TraceContext, output_shapes


def _leaf(node, index: int, through_transpose: bool = False):
    """The tensor behind input ``index`` of ``node`` if it is a leaf (a parameter)."""
    if index >= len(node.next_functions):
        return None
    child = node.next_functions[index][0]
    if child is not None and through_transpose and child.name() == 'TBackward0':
        child = child.next_functions[0][0]
    return getattr(child, 'variable', None) if child is not None else None


def _owner(ctx: TraceContext, tensor, types,
           attr: str = 'weight') -> Optional[Tuple[str, nn.Module]]:
    found = ctx.owner(tensor)
    if found is None or found[1] != attr:
        return None
    module = ctx.modules.get(found[0])
    return (found[0], module) if isinstance(module, types) else None


def _bind_blocks(ctx: TraceContext, slots: np.ndarray, groups: int, reason: str) -> None:
    blocks = slots.reshape(groups, -1)
    ctx.bind(np.tile(blocks[0], groups - 1), blocks[1:].ravel(), reason)


def convolution(ctx: TraceContext, node, ins: Sequence[InputInfo]) -> Outputs:
    """``ConvolutionBackward0`` of nn.Conv1d/2d/3d and nn.ConvTranspose1d/2d/3d.

    - groups == 1: output channels are the layer's own slots.
    - depthwise (groups == in_channels): output channel ``o`` reads input ``o // m``
      (``m = out / in``), so the output slots are the input's, each repeated ``m`` times:
      the conv is bound to its producer.
    - group conv (1 < groups < in_channels): input and output channels are bound across
      the groups, so every group keeps the same channels and the conv is cut equally.
    """
    found = _owner(ctx, _leaf(node, 1), nn.modules.conv._ConvNd)
    if found is None:
        return mixing(ctx, node, ins, 'convolution whose weight is not the weight of an '
                      'nn.Conv*/nn.ConvTranspose* module')
    name, conv = found
    (out_shape, ) = output_shapes(node)
    in_c, out_c, groups = conv.in_channels, conv.out_channels, conv.groups
    in_slots = ctx.channel_input(ins[0], 1, in_c, name, node)
    if groups == 1:
        out_slots = ctx.layer_out(name, out_c)
    elif groups == in_c:
        out_slots = np.repeat(in_slots, out_c // in_c)
    else:
        reason = f'{name} is a group conv (groups={groups})'
        _bind_blocks(ctx, in_slots, groups, reason)
        out_slots = ctx.layer_out(name, out_c)
        _bind_blocks(ctx, out_slots, groups, reason)
    ctx.use(name, 'in', in_slots)
    ctx.use(name, 'out', out_slots)
    return [TensorChannels(out_shape, {1: out_slots})]


def _linear(ctx: TraceContext, node, ins: Sequence[InputInfo], mat1: int,
            mat2: int) -> Outputs:
    found = _owner(ctx, _leaf(node, mat2, through_transpose=True), nn.Linear)
    if found is None:
        if node.name() == 'MmBackward0':
            return matmul(ctx, node, [ins[mat1], ins[mat2]])
        return mixing(ctx, node, ins, 'addmm whose weight is not an nn.Linear weight')
    name, linear = found
    (out_shape, ) = output_shapes(node)
    in_slots = ctx.channel_input(ins[mat1], 1, linear.in_features, name, node)
    out_slots = ctx.layer_out(name, linear.out_features)
    ctx.use(name, 'in', in_slots)
    ctx.use(name, 'out', out_slots)
    return [TensorChannels(out_shape, {1: out_slots})]


def addmm(ctx: TraceContext, node, ins: Sequence[InputInfo]) -> Outputs:
    """``AddmmBackward0``: nn.Linear with bias on 2-D input (on 3-D input it is wrapped in
    views that merge and split the token dims, which the reshape rule follows)."""
    return _linear(ctx, node, ins, mat1=1, mat2=2)


def mm(ctx: TraceContext, node, ins: Sequence[InputInfo]) -> Outputs:
    """``MmBackward0``: nn.Linear without bias, or a plain matmul of activations."""
    return _linear(ctx, node, ins, mat1=0, mat2=1)


def embedding(ctx: TraceContext, node, ins: Sequence[InputInfo]) -> Outputs:
    """``EmbeddingBackward0``: the embedding dim is the layer's own output slots."""
    found = _owner(ctx, _leaf(node, 0), nn.Embedding)
    (out_shape, ) = output_shapes(node)
    if found is None:
        return mixing(ctx, node, ins, 'embedding whose weight is not an nn.Embedding weight')
    name, emb = found
    out_slots = ctx.layer_out(name, emb.embedding_dim)
    ctx.use(name, 'out', out_slots)
    return [TensorChannels(out_shape, {len(out_shape) - 1: out_slots})]


def _norm_owner(ctx: TraceContext, node, types, weight_index: int,
                buffer=None) -> Optional[str]:
    for tensor, attr in ((_leaf(node, weight_index), 'weight'), (buffer, 'running_mean')):
        found = _owner(ctx, tensor, types, attr)
        if found is not None:
            return found[0]
    name = ctx.module_of_node(node)
    return name if name is not None and isinstance(ctx.modules[name], types) else None


def _norm(ctx: TraceContext, node, ins, name: Optional[str], dim: int,
          groups: int = 1) -> Outputs:
    shapes = output_shapes(node)
    if name is None:
        if any(inp.channels is not None and inp.channels.slots for inp in ins[1:]):
            ctx.freeze_all(ins, 'shape', node, 'normalisation whose affine parameters '
                           'belong to no BatchNorm/GroupNorm/LayerNorm module')
        return pass_through(ctx, node, ins[:1])
    out_shape = shapes[0]
    slots = ctx.channel_input(ins[0], dim, out_shape[dim], name, node)
    if 1 < groups < len(slots):
        _bind_blocks(ctx, slots, groups, f'{name} normalises {groups} channel groups')
    ctx.use(name, 'norm', slots)
    return [TensorChannels(out_shape, {dim % len(out_shape): slots})] + \
        [None] * (len(shapes) - 1)


def batch_norm(ctx: TraceContext, node, ins: Sequence[InputInfo]) -> Outputs:
    """``NativeBatchNormBackward0``: per-channel, so its channels are its input's."""
    name = _norm_owner(ctx, node, nn.modules.batchnorm._BatchNorm, 1,
                       getattr(node, '_saved_running_mean', None))
    return _norm(ctx, node, ins, name, 1)


def group_norm(ctx: TraceContext, node, ins: Sequence[InputInfo]) -> Outputs:
    """``NativeGroupNormBackward0``: channels are bound across the groups, so each group
    keeps the same channels and ``num_groups`` still divides the pruned width."""
    name = _norm_owner(ctx, node, nn.GroupNorm, 1)
    return _norm(ctx, node, ins, name, 1, groups=int(node._saved_group))


def layer_norm(ctx: TraceContext, node, ins: Sequence[InputInfo]) -> Outputs:
    """``NativeLayerNormBackward0`` over the last dim (channels-last layouts, tokens).

    Normalising over several trailing dims mixes the channels with them: frozen.
    """
    normalized = len(node._saved_normalized_shape)
    if normalized == 1:
        return _norm(ctx, node, ins, _norm_owner(ctx, node, nn.LayerNorm, 1), -1)
    x = ins[0].channels
    (out_shape, ) = output_shapes(node)[:1]
    if x is None:
        return [None]
    slots = dict(x.slots)
    for dim in range(x.ndim - normalized, x.ndim):
        if dim in slots:
            ctx.freeze(slots.pop(dim), 'mixing', node,
                       f'layer norm over {normalized} dims mixes channel dim {dim}')
    return [TensorChannels(out_shape, slots)]


def prelu(ctx: TraceContext, node, ins: Sequence[InputInfo]) -> Outputs:
    """``PreluKernelBackward0``: a per-channel weight (C,) binds to the input's dim-1 slots."""
    outs = pass_through(ctx, node, ins[:1])
    x, weight = ins[0].channels, ins[1].channels if len(ins) > 1 else None
    if x is None or weight is None or not weight.slots:
        return outs
    (weight_slots, ) = weight.slots.values()
    x_slots = x.slots.get(1)
    if x_slots is None or len(x_slots) != len(weight_slots):
        ctx.freeze(weight_slots, 'fixed', node, 'per-channel weight on fixed channels')
    else:
        ctx.bind(x_slots, weight_slots, f'{node.name()} has a per-channel weight')
    return outs
