"""Trace a model: one forward, then an iterative walk of its autograd graph.

Forward hooks map every module call's output grad_fn to the module.  The walk visits each
node the forward created once, in topological order, and applies the node's channel rule:
the nodes reachable from the outputs and module outputs first, then those whose results
nothing uses (dead branches: they still run in the pruned model, so their operands'
channels must still agree).  The cost is linear in nodes + edges, with no recursion and
no enumeration of paths.
"""
from collections import defaultdict
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn as nn

from ..layers import LayerKindsArg, as_table
from .channels import InputInfo, TensorChannels
from . import heads
from .composite import WholeCall, inner_order, whole_calls
from .context import ChannelUse, TraceContext, check_gqa, check_heads
from .forward import all_modules, default_example_inputs, record_forward
from .layer_params import tie_layer_params, tie_shared_layers
from .layer_rules import RESHAPING_VIEWS
from .literal_sizes import (freeze_params_of_opaque_ops, freeze_untracked_params,
                            size_dependent_slots)
from .rules import rule_for
from .slots import FrozenReason, SlotTable

MASK_BUFFERS = ('in_mask', 'out_mask')


@dataclass
class ChannelGraph:
    """What a trace found: slots, their bindings and freezes, and who uses them.

    Args:
        slots: the slot table (bindings, freezes, sources).
        uses: every module/parameter axis whose channels follow slots.
        module_calls: how often each module ran during the trace.
        untraced: modules with parameters that did not run (their channels are unknown).
        op_counts: grad_fn name -> how many such nodes the walk visited.
        device: ``'meta'`` if the forward ran on shapes only, ``'real'`` if the model
            needed real values.
        out_dims: module name -> the (negative) dim of its output that holds its output
            channels, as traced (``-3`` for NCHW, ``-1`` for channels-last).
        size_dependent: slots whose pruning the model's code might not follow: they reach
            a view, split or norm the code may size by hand, or a call that reads them
            outside autograd (``literal_sizes.py``).
        whole_heads: slots read as whole attention heads (``heads='whole'``): their code
            may split the slim heads by a head count of its own without failing.
        summed: slots a sum over channels or a product of activations adds up over:
            exact after pruning only where the pruned channels are zero there.
        sliced: slots of a channel dim sliced at bounds the code computes.
    """
    slots: SlotTable
    uses: List[ChannelUse]
    module_calls: Dict[str, int] = field(default_factory=dict)
    untraced: List[str] = field(default_factory=list)
    op_counts: Dict[str, int] = field(default_factory=dict)
    device: str = 'meta'
    out_dims: Dict[str, int] = field(default_factory=dict)
    size_dependent: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    whole_heads: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    summed: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    sliced: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


def _topological_order(roots: Sequence[Any]) -> Tuple[List[Any], Dict[Any, List[Any]]]:
    """Nodes reachable from ``roots``, inputs first, and each node's consumers.

    The last root is walked first: nodes reached from it come earliest in the order.
    """
    order: List[Any] = []
    consumers: Dict[Any, List[Any]] = defaultdict(list)
    seen = set()
    stack = [(root, False) for root in roots]
    while stack:
        node, done = stack.pop()
        if done:
            order.append(node)
            continue
        if node in seen:
            continue
        seen.add(node)
        stack.append((node, True))
        for child, _ in node.next_functions:
            if child is not None:
                consumers[child].append(node)
                if child not in seen:
                    stack.append((child, False))
    return order, consumers


def trace(model: nn.Module, example_inputs: Any = None, strict: bool = False,
          except_start_keys: Sequence[str] = (), meta: bool = True,
          layer_kinds: LayerKindsArg = None, gqa: str = 'kv',
          heads: str = 'whole') -> ChannelGraph:
    """Trace ``model`` into a :class:`ChannelGraph`.

    Args:
        model: the model; left exactly as it was (tensors, grad flags, modes, no hooks).
        example_inputs: a tensor, a tuple of positional args or a dict of kwargs;
            default a random 1x3x224x224 image.
        strict: raise :class:`TracingError` on an op missing from the rule table or a
            shape a rule cannot explain, instead of freezing the channels that reach it.
        except_start_keys: module-name prefixes whose output channels are never pruned.
        meta: run the forward on the ``meta`` device (shapes only) when the model allows
            it; False always computes on the real tensors.
        layer_kinds: layer kinds for this trace only, over the registered ones
            (:class:`~razorlib.layers.LayerKind` instances, classes, names or config dicts).
        gqa: what grouped-query attention prunes: ``'kv'`` a key/value head with all its
            query heads; ``'query'`` the same query heads in every key/value group, each
            key/value head kept (``num_key_value_groups`` shrinks, the kv heads stay).
        heads: what attention prunes of a reshape's ``(heads, head_dim)`` split:
            ``'whole'`` whole heads; ``'width'`` the same ``head_dim`` positions of every
            head (the head count stays; RoPE keeps position ``i`` with ``i + d/2`` and the
            rotary ``inv_freq`` entries with them).

    Example:
        >>> import torch.nn as nn
        >>> net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 4, 3))
        >>> graph = trace(net, torch.randn(1, 3, 16, 16))
        >>> sorted(u.name for u in graph.uses if u.role == 'out')
        ['0', '2']
    """
    check_gqa(gqa)
    check_heads(heads)
    if torch.is_inference_mode_enabled():
        raise RuntimeError('the trace follows autograd, which torch.inference_mode() turns '
                           'off: trace (or prune) outside inference_mode; torch.no_grad() '
                           'is fine')
    modules = all_modules(model)
    for name, module in modules:
        for buffer in MASK_BUFFERS:
            if buffer in module._buffers:
                raise ValueError(f'module {name!r} already has a {buffer!r} buffer: the model '
                                 'was prepared by a pruner; call remove_masks(model) first')
    if example_inputs is None:
        example_inputs = default_example_inputs(model)
    kinds = as_table(layer_kinds)
    record = record_forward(model, example_inputs, meta, modules, watch=[
        name for name, module in dict(modules).items()
        if getattr(kinds.kind_of(module), 'traced_as_module', False)])
    if not record.outputs:
        raise ValueError('the model outputs no tensor that depends on its parameters; '
                         'nothing to trace')
    with torch.enable_grad():  # the caller may be under no_grad
        pseudo_loss = sum(t.sum() for t in record.outputs)
    ctx = TraceContext(model, strict, record.node_modules, record.owners,
                       kinds, modules=record.modules, gqa=gqa, heads=heads,
                       own_sizes=record.sizes.own_sizes)
    # Created nodes go first in the list, so they are walked last: the order (and so the
    # slots and group ids) of everything the outputs reach does not depend on dead code.
    roots = record.created + [pseudo_loss.grad_fn] + \
        [node for node, _, _ in record.module_outputs]
    order, ctx.consumers = _topological_order(roots)
    channels = _walk(ctx, order, whole_calls(ctx, record.module_calls))
    tie_layer_params(ctx)
    tie_shared_layers(ctx)
    _freeze_outputs(ctx, channels, record.outputs)
    _freeze_dead_ends(ctx, channels, record.module_outputs)
    _freeze_excepted(ctx, except_start_keys)
    _freeze_uncalled_layers(ctx, record.calls)
    freeze_untracked_params(ctx, record.sizes, channels)
    freeze_params_of_opaque_ops(ctx, order, record.sizes)
    size_dependent = size_dependent_slots(ctx, order, record.sizes, channels)
    untraced = [name for name, m in record.modules.items() if name not in record.calls
                and any(p is not None for p in m._parameters.values())]
    op_counts: Dict[str, int] = defaultdict(int)
    for node in order:
        op_counts[node.name()] += 1
    return ChannelGraph(ctx.slots, list(ctx.uses.values()), dict(record.calls), untraced,
                        dict(op_counts), record.device,
                        _output_dims(ctx, channels, record.module_outputs, record.calls),
                        size_dependent,
                        np.array(sorted(ctx.whole_heads), dtype=np.int64),
                        np.array(sorted(ctx.summed), dtype=np.int64),
                        np.array(sorted(ctx.sliced), dtype=np.int64))


def _input_info(ctx: TraceContext, channels: Dict, child, nr: int) -> InputInfo:
    if child is None:
        return InputInfo(None, nr, None, None)
    variable = getattr(child, 'variable', None)
    if variable is not None:
        return InputInfo(child, nr, tuple(variable.shape), None,
                         param=ctx.tensor_name(variable), tensor=variable,
                         resolve=lambda: ctx.leaf_channels(variable))
    shape = tuple(child._input_metadata[nr].shape)
    lazy = ctx.lazy_channels.get(child)
    if lazy is not None and (child, nr) not in channels:
        return InputInfo(child, nr, shape, None, resolve=lazy)
    return InputInfo(child, nr, shape, channels.get((child, nr)))


def _of_leaf_only(ctx: TraceContext, node, rule) -> bool:
    """A transpose of a parameter (``F.linear``'s ``weight.t()``), or a reshaping view of
    a parameter or of such a view (Mamba's ``F.conv1d(x, conv1d.weight.squeeze(1)
    .unsqueeze(1))``)."""
    child = node.next_functions[0][0] if node.next_functions else None
    if rule.kind == 'permute' and node.name() == 'TBackward0':
        return getattr(child, 'variable', None) is not None
    return node.name() in RESHAPING_VIEWS and child is not None and \
        (getattr(child, 'variable', None) is not None or child in ctx.lazy_channels)


def _walk(ctx: TraceContext, order: Sequence[Any],
          whole: Dict[Any, WholeCall]) -> Dict[Tuple[Any, int], TensorChannels]:
    """Apply every node's rule in ``order``.

    A transposed or reshaped parameter is left to whoever reads it
    (:attr:`TraceContext.lazy_channels`): a layer's kind reads its module's widths, not
    the transposed weight, so the weight needs no slots, and most parameters of a
    transformer are such weights.
    The calls in ``whole`` are traced at their output node by their kind; their inner
    nodes are walked only if the kind declines (:mod:`.composite`).
    """
    channels: Dict[Tuple[Any, int], TensorChannels] = {}
    inner = set().union(*(call.inner for call in whole.values()))
    for node in order:
        if getattr(node, 'variable', None) is not None or node in inner:
            continue
        call = whole.get(node)
        if call is not None and _trace_whole(ctx, channels, call):
            continue
        if call is not None:
            for skipped in inner_order(order, call):
                _apply(ctx, channels, skipped, rule_for(skipped.name()))
        rule = rule_for(node.name())
        if _of_leaf_only(ctx, node, rule):
            ctx.lazy_channels[node] = partial(_apply, ctx, channels, node, rule)
            continue
        _apply(ctx, channels, node, rule)
    return channels


def _trace_whole(ctx: TraceContext, channels: Dict, whole: WholeCall) -> bool:
    """Trace a module call as one op from its input to its output node; False if its
    kind cannot follow it."""
    node, (source, nr) = whole.call.output, whole.call.input
    info = heads.settle(ctx, node, _input_info(ctx, channels, source, nr))
    traced = whole.kind.trace(ctx, node, [info], whole.call.name, whole.module)
    if traced is None:
        return False
    slots, dim = traced
    shape = tuple(node._input_metadata[0].shape)
    channels[(node, 0)] = TensorChannels(shape, {dim % len(shape): slots})
    return True


def _apply(ctx: TraceContext, channels: Dict, node, rule) -> Optional[TensorChannels]:
    """Run ``rule`` on ``node`` and record its outputs' channels; returns output 0's."""
    if (node, 0) in channels:
        return channels[(node, 0)]
    ins = [_input_info(ctx, channels, child, nr) for child, nr in node.next_functions]
    if not rule.keeps_pending:
        ins = [heads.settle(ctx, node, inp) for inp in ins]
    outs = rule.fn(ctx, node, ins)
    for nr, meta in enumerate(node._input_metadata):
        tc = outs[nr] if nr < len(outs) else None
        channels[(node, nr)] = tc if tc is not None else TensorChannels(tuple(meta.shape))
    return channels.get((node, 0))


def _channels_of(ctx: TraceContext, channels: Dict, node, nr: int) -> Optional[TensorChannels]:
    variable = getattr(node, 'variable', None)
    if variable is not None:
        return ctx.leaf_channels(variable)
    lazy = ctx.lazy_channels.get(node)
    if lazy is not None:
        lazy()
    return channels.get((node, nr))


def _freeze_outputs(ctx: TraceContext, channels: Dict, outputs: Sequence[torch.Tensor]) -> None:
    for tensor in outputs:
        node = tensor.grad_fn
        tc = _channels_of(ctx, channels, node, tensor.output_nr) if node else \
            ctx.leaf_channels(tensor)
        if tc is not None and tc.slots:
            ctx.slots.freeze(tc.all_slots(), FrozenReason(
                'output', node.name() if node else '', 'channels of a model output',
                upstream=tuple(filter(None, [ctx.module_of_node(node)]))))


def _freeze_dead_ends(ctx: TraceContext, channels: Dict,
                      module_outputs: Sequence[Tuple[Any, int, str]]) -> None:
    """A module output that nothing in the graph consumes (an auxiliary head, a dropped
    feature) keeps its channels, so the module still runs after pruning."""
    for node, nr, name in module_outputs:
        if ctx.consumers.get(node):
            continue
        tc = channels.get((node, nr))
        if tc is not None and tc.slots:
            ctx.slots.freeze(tc.all_slots(), FrozenReason(
                'dead-end', name, 'output of a module that nothing uses', upstream=(name, )))


def _output_dims(ctx: TraceContext, channels: Dict,
                 module_outputs: Sequence[Tuple[Any, int, str]],
                 calls: Dict[str, int]) -> Dict[str, int]:
    """Where each layer/norm's output channels sit in the tensor its forward returns; for
    a layer whose forward never ran, in the output of the op that ran its weight
    (:attr:`TraceContext.op_out_dims`)."""
    dims: Dict[str, int] = {}
    for node, nr, name in module_outputs:
        use = ctx.uses.get((name, 'out', 0)) or ctx.uses.get((name, 'norm', 0))
        tc = channels.get((node, nr))
        if use is None or tc is None or name in dims:
            continue
        for dim, slots in tc.slots.items():
            if slots is use.slots or np.array_equal(slots, use.slots):
                dims[name] = dim - tc.ndim
                break
    dims.update((name, dim) for name, dim in ctx.op_out_dims.items() if name not in calls)
    return dims


def _freeze_excepted(ctx: TraceContext, keys: Sequence[str]) -> None:
    if isinstance(keys, str):
        keys = (keys, )
    for use in ctx.uses.values():
        if use.role in ('out', 'norm', 'param') and any(use.name.startswith(k) for k in keys):
            ctx.slots.freeze(use.slots, FrozenReason(
                'except-key', use.name, 'excluded by except_start_keys'))


def _freeze_uncalled_layers(ctx: TraceContext, calls: Dict[str, int]) -> None:
    """Freeze the axes of layers whose weights an op used while their own forward never
    ran (``F.linear(x, module.weight)``), where the masked model could not follow their
    pruning: masks live in the forward.

    An output axis needs no mask: its pruned channels stay apart from the kept ones until
    something mixes them, and whatever does is a called layer (whose input mask zeroes
    them), an input axis frozen here, or an op the pruner checks on the model (a sum over
    channels: ``ctx.summed``).  So only the input and norm axes freeze, except an input
    axis whose slots the kind made the output's (a depthwise conv, Mamba's ``conv1d``,
    run as ``F.conv1d`` on its weight): such a layer mixes no channels."""
    for use in ctx.uses.values():
        if use.role == 'out' or use.role == 'in' and _unmixed(ctx, use.name):
            continue
        if use.role != 'param' and use.name not in calls:
            ctx.slots.freeze(use.slots, FrozenReason(
                'mixing', use.name, f'{use.name}\'s weight is used outside its forward '
                '(e.g. F.linear on it), where its channel masks cannot apply'
                + _conversion_hint(ctx, use.name), upstream=(use.name, )))


def _unmixed(ctx: TraceContext, name: str) -> bool:
    """Whether each output channel of layer ``name`` is one of its input channels (the
    same slots on both axes): it mixes none."""
    ins, out = ctx.uses.get((name, 'in', 0)), ctx.uses.get((name, 'out', 0))
    return ins is not None and out is not None and set(out.slots.tolist()) == \
        set(ins.slots.tolist())


def _conversion_hint(ctx: TraceContext, name: str) -> str:
    """Where razorlib.nn converts the module that runs ``name``'s weight (torchvision's
    Swin attention) into one whose layers are called: how to, else ``''``."""
    parent = ctx.modules.get(name.rpartition('.')[0])
    if type(parent).__name__ in ('ShiftedWindowAttention', 'ShiftedWindowAttentionV2'):
        return ('; torchvision\'s Swin attention: convert the model first with '
                'razorlib.nn.convert_window_attention(model)')
    return ''
