"""Channel rules for the ops that layers run on their weights: conv, linear, embedding
and normalisation.

A rule finds the layer behind its node (the module owning the weight leaf, a saved
running-mean buffer, or, for kinds that allow it, the module whose forward returned the
node) and hands the node to that module's :class:`~razorlib.layers.LayerKind`, which binds
the layer's channel axes.  What happens when no kind claims the op (a functional
convolution, a matmul of two activations, a norm without a module) is the op's own
knowledge and stays here.
"""
from typing import Any, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from ..layers import LayerKind
from .basic_rules import Outputs, matmul, mixing, pass_through
from .channels import InputInfo, TensorChannels
from .context import ChannelUse, TraceContext, output_shapes

#: grad_fn name -> (input index of the layer's weight, whether a TBackward0 sits between).
WEIGHT_INPUT = {
    'ConvolutionBackward0': (1, False),
    'AddmmBackward0': (2, True),
    'MmBackward0': (1, True),
    'EmbeddingBackward0': (0, False),
    'NativeBatchNormBackward0': (1, False),
    'CudnnBatchNormBackward0': (1, False),
    'MiopenBatchNormBackward0': (1, False),
    'NativeLayerNormBackward0': (1, False),
    'NativeGroupNormBackward0': (1, False),
    'PreluKernelBackward0': (1, False),
}

#: grad_fns whose weight input is a view of the layer's parameter: PReLU views its
#: ``(C,)`` slopes to broadcast over the input (``(1, C, 1, 1)``).
VIEWED_WEIGHT = ('PreluKernelBackward0', )

#: Views that only reshape a tensor: a chain of them that gives a parameter its own
#: shape back is the parameter (:func:`_viewed_back`).
RESHAPING_VIEWS = ('ViewBackward0', 'UnsafeViewBackward0', 'ReshapeAliasBackward0',
                   'SqueezeBackward0', 'SqueezeBackward1', 'SqueezeBackward2',
                   'UnsqueezeBackward0')


def _viewed_back(child):
    """The leaf behind a chain of :data:`RESHAPING_VIEWS` that ends in the leaf's own
    shape (Mamba's ``F.conv1d(x, conv1d.weight.squeeze(1).unsqueeze(1))``): the op reads
    the parameter as it is stored, so its layer's kind traces it as a call of the layer.
    ``None`` for anything else."""
    shape = tuple(child._input_metadata[0].shape)
    while child is not None and child.name() in RESHAPING_VIEWS:
        child = child.next_functions[0][0]
    variable = getattr(child, 'variable', None)
    return variable if variable is not None and tuple(variable.shape) == shape else None


def _leaf(node, index: int, through_transpose: bool = False):
    """The tensor behind input ``index`` of ``node`` if it is a leaf (a parameter), also
    through a transpose (``F.linear``'s ``t()``, or ``weight.T`` / ``weight.mT`` in a
    Linear subclass's own forward, as Falcon's ``input @ self.weight.T``), a repeat
    (``F.instance_norm`` repeats its affine parameters over the batch), views that give
    it its own shape back (:func:`_viewed_back`) or, for the ops of
    :data:`VIEWED_WEIGHT`, a view."""
    if index >= len(node.next_functions):
        return None
    child = node.next_functions[index][0]
    if child is None:
        return None
    if child.name() in RESHAPING_VIEWS:
        viewed = _viewed_back(child)
        if viewed is not None:
            return viewed
    hops = ('RepeatBackward0', 'ViewBackward0') if node.name() in VIEWED_WEIGHT else \
        ('RepeatBackward0', )
    if through_transpose and _is_transpose_2d(child) or child.name() in hops:
        child = child.next_functions[0][0]
    return getattr(child, 'variable', None) if child is not None else None


def _is_transpose_2d(node) -> bool:
    """Whether ``node`` transposes a matrix: ``t()``, ``.T`` (a permute) or ``.mT``."""
    name = node.name()
    if name == 'TBackward0':
        return True
    if name == 'PermuteBackward0':
        return tuple(node._saved_dims) in ((1, 0), (-1, -2))
    if name == 'TransposeBackward0':
        return {node._saved_dim0 % 2, node._saved_dim1 % 2} == {0, 1}
    return False


def _returning_module(ctx: TraceContext, node) -> Optional[str]:
    """The module whose forward returned the node's output, directly or through the one
    view that consumes it (``F.instance_norm`` views its result back to the input's
    shape)."""
    name = ctx.module_of_node(node)
    consumers = ctx.consumers.get(node, [])
    if name is None and len(consumers) == 1 and consumers[0].name() == 'ViewBackward0':
        name = ctx.module_of_node(consumers[0])
    return name


def _candidates(ctx: TraceContext, node) -> Iterator[Tuple[str, Optional[str]]]:
    """``(module name, attribute)`` of the tensors that may identify the layer; attribute
    None for the module whose forward returned the node."""
    index, through = WEIGHT_INPUT[node.name()]
    for tensor in (_leaf(node, index, through), getattr(node, '_saved_running_mean', None)):
        yield from ctx.owners_of(tensor)
    name = _returning_module(ctx, node)
    if name is not None:
        yield name, None


def _claiming(ctx: TraceContext, node) -> Iterator[Tuple[str, Any, LayerKind, Optional[str]]]:
    """``(name, module, kind, attribute)`` of each candidate layer whose kind claims
    ``node``, in :func:`_candidates`' order."""
    op = node.name()
    for name, attr in _candidates(ctx, node):
        module = ctx.modules.get(name)
        kind = ctx.kinds.kind_of(module) if module is not None else None
        if kind is None or op not in kind.grad_fns:
            continue
        if attr in kind.weight_attrs or (attr is None and kind.trace_by_output):
            yield name, module, kind, attr


def find_layer(ctx: TraceContext, node) -> Optional[Tuple[str, Any, LayerKind]]:
    """The layer whose kind claims ``node``: ``(name, module, kind)``, or None.  Of
    several modules holding its weight (``s2.weight = s1.weight``), the one whose forward
    returned the node where the graph says so (its own widths and settings trace it),
    else the first."""
    layers = list(_claiming(ctx, node))
    caller = _returning_module(ctx, node)
    for name, module, kind, attr in layers:
        if name == caller and attr is not None:
            return name, module, kind
    return layers[0][:3] if layers else None


def _twins(ctx: TraceContext, node, name: str, kind: LayerKind) -> List[Tuple[str, str, str]]:
    """``(twin, its attribute, name's attribute)`` for each other module of ``kind`` that
    holds, as one of the kind's weights, a tensor through which :func:`find_layer` took
    the node for ``name``'s: a weight two modules share (``s2.weight = s1.weight``)."""
    index, through = WEIGHT_INPUT[node.name()]
    twins = []
    for tensor in (_leaf(node, index, through), getattr(node, '_saved_running_mean', None)):
        owners = ctx.owners_of(tensor)
        own = next((attr for owner, attr in owners if owner == name), None)
        twins += [(owner, attr, own) for owner, attr in owners if own is not None and
                  owner != name and ctx.layer_kind(owner) is kind and attr in kind.weight_attrs]
    return list(dict.fromkeys(twins))


def _share_uses(ctx: TraceContext, node, name: str, kind: LayerKind,
                out_slots: np.ndarray) -> None:
    """Bind the channel axes of ``name`` (which ran ``node``) to those of each module
    sharing its weight with the same kind, attribute and widths, and give such a module
    ``name``'s axes where it has none yet (its own call may come later, or never: it is
    then frozen as a layer whose weight runs outside its forward), so the pruner masks and
    slices both alike; without axes the other would keep its whole weight, which slicing
    refuses to tear from ``name``'s.  A module that would slice the weight otherwise
    (other widths) freezes ``name``'s channels, the two named.

    ``out_slots`` are the channels of ``node``'s output: where ``name``'s forward
    returned it, ``name``'s output axis holds them (a norm's are its input's, not those
    shared from its twin), by which the tracer finds its output dim."""
    twins = _twins(ctx, node, name, kind)
    if not twins:
        return
    out = ctx.uses.get((name, 'out', 0)) or ctx.uses.get((name, 'norm', 0))
    if out is not None and len(out.slots) == len(out_slots) and \
            _returning_module(ctx, node) == name:
        ctx.uses[(name, out.role, 0)] = ChannelUse(name, out.role, out_slots)
    uses = [use for (owner, _, _), use in ctx.uses.items() if owner == name]
    widths = kind.widths(ctx.modules[name])
    for twin, attr, own in twins:
        shared = f'{_qualified(name, own)} is also {_qualified(twin, attr)}'
        twin_widths = kind.widths(ctx.modules[twin])
        if attr != own or twin_widths != widths:
            for use in uses:
                ctx.freeze(use.slots, 'fixed', node, f'{shared}, a second module that would '
                           f'slice it otherwise ({widths} against {twin_widths})')
            continue
        for use in uses:
            key = (twin, use.role, use.dim)
            if key in ctx.uses:
                ctx.bind(ctx.uses[key].slots, use.slots, shared)
            else:
                ctx.uses[key] = ChannelUse(twin, use.role, use.slots, use.dim)


def _qualified(module_name: str, attr: str) -> str:
    return f'{module_name}.{attr}' if module_name else attr


def _traced_by_kind(ctx: TraceContext, node, ins: Sequence[InputInfo]) -> Optional[Outputs]:
    found = find_layer(ctx, node)
    if found is None:
        return None
    name, module, kind = found
    traced = kind.trace(ctx, node, ins, name, module)
    if traced is None:
        return None
    slots, dim = traced
    _share_uses(ctx, node, name, kind, slots)
    shapes = output_shapes(node)
    out_shape = shapes[0]
    ctx.op_out_dims.setdefault(name, dim % len(out_shape) - len(out_shape))
    return [TensorChannels(out_shape, {dim % len(out_shape): slots})] + \
        [None] * (len(shapes) - 1)


def _unclaimed(ctx: TraceContext, node, op: str, layers: str) -> str:
    """Why ``node``, which no kind traced, mixes its channels: its weight belongs to no
    module with a kind, or to a layer whose kind does not take the op for its own call
    (the weight run in another layout: ``F.conv_transpose2d(z, conv.weight)``,
    ``torch.addmm(b, z, fc.weight)``, a tied decoder's)."""
    found = find_layer(ctx, node)
    if found is None:
        return f'{op} whose weight belongs to no {layers} or other module with a layer kind'
    return f'{op} runs the weight of {found[0]} otherwise than {found[0]} does'


def convolution(ctx: TraceContext, node, ins: Sequence[InputInfo]) -> Outputs:
    """``ConvolutionBackward0``; without a layer kind (a functional conv), mixing."""
    return _traced_by_kind(ctx, node, ins) or mixing(
        ctx, node, ins, _unclaimed(ctx, node, 'convolution', 'nn.Conv*'))


def addmm(ctx: TraceContext, node, ins: Sequence[InputInfo]) -> Outputs:
    """``AddmmBackward0``: a linear layer with bias on 2-D input (on N-D input it is
    wrapped in views that merge and split the token dims, which the reshape rule
    follows); without a layer kind, mixing."""
    return _traced_by_kind(ctx, node, ins) or mixing(
        ctx, node, ins, _unclaimed(ctx, node, 'addmm', 'nn.Linear'))


def mm(ctx: TraceContext, node, ins: Sequence[InputInfo]) -> Outputs:
    """``MmBackward0``: a linear layer without bias, or a plain matmul of activations."""
    return _traced_by_kind(ctx, node, ins) or matmul(ctx, node, ins[:2])


def embedding(ctx: TraceContext, node, ins: Sequence[InputInfo]) -> Outputs:
    """``EmbeddingBackward0``; without a layer kind, mixing."""
    return _traced_by_kind(ctx, node, ins) or mixing(
        ctx, node, ins,
        'embedding whose weight belongs to no nn.Embedding or other module with a layer kind')


def _freeze_dims(ctx: TraceContext, node, ins: Sequence[InputInfo], dims: Sequence[int],
                 why: str) -> Outputs:
    """The input's channels through ``node``, those on ``dims`` (negative: from the end)
    frozen: a norm whose statistics mix them."""
    x = ins[0].channels
    (out_shape, ) = output_shapes(node)[:1]
    if x is None:
        return [None]
    slots = dict(x.slots)
    for dim in sorted({dim % x.ndim for dim in dims}):
        if dim in slots:
            ctx.freeze(slots.pop(dim), 'mixing', node, why.format(dim=dim))
    return [TensorChannels(out_shape, slots)]


def _unowned_norm(ctx: TraceContext, node, ins: Sequence[InputInfo]) -> Outputs:
    """A norm no layer kind claims (a functional call, or a module without affine
    parameters).  Batch and instance norms use statistics of each channel alone, so
    their channels pass through; layer and group norms average over the channels they
    normalise, which a masked model would count as zeros and a slim one would not:
    those channels freeze."""
    if any(inp.channels is not None and inp.channels.slots for inp in ins[1:]):
        ctx.freeze_all(ins, 'shape', node, 'normalisation whose affine parameters belong to '
                       'no module with a layer kind')
    if node.name() == 'NativeLayerNormBackward0':
        return _freeze_dims(ctx, node, ins, [-1], 'layer norm without a module takes its '
                            'statistics over channel dim {dim}')
    if node.name() == 'NativeGroupNormBackward0':
        return _freeze_dims(ctx, node, ins, [1], 'group norm without a module takes its '
                            'statistics over channel dim {dim}')
    return pass_through(ctx, node, ins[:1])


def norm(ctx: TraceContext, node, ins: Sequence[InputInfo]) -> Outputs:
    """Batch and group norms: the layer kind binds the channels; for a norm no kind
    claims see :func:`_unowned_norm` (``F.batch_norm`` passes its channels through,
    ``F.group_norm`` freezes them)."""
    return _traced_by_kind(ctx, node, ins) or _unowned_norm(ctx, node, ins)


def layer_norm(ctx: TraceContext, node, ins: Sequence[InputInfo]) -> Outputs:
    """``NativeLayerNormBackward0``: over one dim the layer kind binds the channels;
    normalising over several trailing dims mixes the channels with them: frozen."""
    normalized = len(node._saved_normalized_shape)
    if normalized == 1:
        return norm(ctx, node, ins)
    return _freeze_dims(ctx, node, ins, range(-normalized, 0),
                        f'layer norm over {normalized} dims mixes channel dim {{dim}}')


def prelu(ctx: TraceContext, node, ins: Sequence[InputInfo]) -> Outputs:
    """``PreluKernelBackward0``: an ``nn.PReLU`` of several slopes by its layer kind
    (sliced with its ``num_parameters``); otherwise a per-channel weight (C,) binds to the
    input's dim-1 slots, and one shared slope passes every channel through."""
    traced = _traced_by_kind(ctx, node, ins)
    if traced is not None:
        return traced
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


__all__ = ['WEIGHT_INPUT', 'find_layer', 'convolution', 'addmm', 'mm', 'embedding', 'norm',
           'layer_norm', 'prelu']
