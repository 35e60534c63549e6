"""Channel rules for ops that keep, bind, reduce or mix channels without moving them.

Every rule has the signature ``rule(ctx, node, inputs) -> list`` with one
:class:`TensorChannels` (or None for "no channel slots") per forward output of ``node``.
"""
from typing import Dict, Iterable, List, Optional, Sequence

import numpy as np

from . import heads
from .channels import InputInfo, TensorChannels
from .context import TraceContext, dims_tuple, normalize_dim, output_shapes

Outputs = List[Optional[TensorChannels]]


def opaque(node) -> Outputs:
    """Outputs that carry no prunable channels."""
    return [TensorChannels(shape) for shape in output_shapes(node)]


def signed(value: int) -> int:
    """grad_fns save sizes as unsigned 64-bit values: ``-1`` reads ``2**64 - 1``."""
    return value - 2**64 if value >= 2**63 else value


def moved_dims(node, ndim: int) -> Dict[int, str]:
    """The dims along which a per-channel op moves values between positions, with how.

    Pooling with a window, stride or padding wider than one, padding and ``roll`` act on
    the positions of their dims: on spatial dims that is what they are for, but on a
    channel dim (``roll(x, 1, 1)``, ``pad`` by ``(1, -1)`` over channels, a max pool over
    channels by ``max_pool3d(x.unsqueeze(1), (3, 1, 1))``) channel ``i`` of the output
    reads other channels, even where the size stays.

    Example:
        >>> import torch, torch.nn.functional as F
        >>> x = torch.randn(1, 4, 5, 5, requires_grad=True)
        >>> moved_dims(torch.roll(x, 1, 1).grad_fn, 4)
        {1: 'rolls it by 1'}
        >>> sorted(moved_dims(F.avg_pool2d(x, (1, 3), 1, (0, 1)).grad_fn, 4))
        [3]
    """
    kernel = getattr(node, '_saved_kernel_size', None)
    if kernel is not None:  # pooling over the last len(kernel) dims
        stride = node._saved_stride or kernel
        padding = node._saved_padding
        first = ndim - len(kernel)
        return {first + i: f'pools over it (window {k}, stride {s}, padding {p})'
                for i, (k, s, p) in enumerate(zip(kernel, stride, padding))
                if (k, s, p) != (1, 1, 0)}
    pad = getattr(node, '_saved_pad', None)
    if pad is None:
        pad = getattr(node, '_saved_padding', None)
    if pad is not None:  # (last dim's left, right, the dim before's left, right, ...)
        pad = [signed(p) for p in pad]
        return {ndim - 1 - i: f'pads it by {tuple(pad[2 * i:2 * i + 2])}'
                for i in range(len(pad) // 2) if pad[2 * i] or pad[2 * i + 1]}
    shifts = getattr(node, '_saved_shifts', None)
    if shifts is not None:
        dims = node._saved_dims
        if not dims:  # roll of the flattened tensor
            return {d: f'rolls the flattened tensor by {shifts[0]}' for d in range(ndim)}
        return {normalize_dim(d, ndim): f'rolls it by {signed(s)}'
                for d, s in zip(dims, shifts) if signed(s)}
    return {}


def pass_through(ctx: TraceContext, node, ins: Sequence[InputInfo]) -> Outputs:
    """Per-channel ops: activations, pooling, interpolation, padding, dropout, casts.

    The output keeps the input's slots on every dim whose size it keeps and along which
    it moves no values (:func:`moved_dims`); any other channel dim (padding or pooling
    over channels, a roll of the flattened tensor) is frozen.

    Example: ``relu(conv(x))`` has ``conv``'s output slots on dim 1.
    """
    x = ins[0].channels
    shapes = output_shapes(node)
    if x is None:
        return [None] * len(shapes)
    out_shape = shapes[0]
    if len(out_shape) != x.ndim:
        ctx.freeze(x.all_slots(), 'shape', node,
                   f'a per-channel op changed the rank from {x.ndim} to {len(out_shape)}')
        return opaque(node)
    moved = moved_dims(node, x.ndim)
    slots = {}
    for dim, dim_slots in x.slots.items():
        if out_shape[dim] != x.shape[dim]:
            ctx.freeze(dim_slots, 'shape', node,
                       f'changes the size of channel dim {dim} '
                       f'({x.shape[dim]} -> {out_shape[dim]})')
        elif dim in moved:
            ctx.freeze(dim_slots, 'mixing', node, f'moves values along channel dim {dim}: '
                       f'{moved[dim]}')
        else:
            slots[dim] = dim_slots
    split = x.split
    if split is not None and any(out_shape[d] != x.shape[d] or d in moved for d in split.dims):
        ctx.freeze(split.grid.ravel(), 'shape', node,
                   'changes the size of a dim of channels split by a reshape, or moves '
                   'values along it')
        split = None
    repeats = {d: r for d, r in x.repeats.items()
               if out_shape[d] == x.shape[d] and d not in moved}
    return [TensorChannels(out_shape, slots, split, repeats)] + [None] * (len(shapes) - 1)


def bind_aligned(ctx: TraceContext, node, ins: Sequence[InputInfo],
                 out_shape: Sequence[int], skip: Iterable[int] = ()) -> Dict[int, np.ndarray]:
    """Bind the slots that broadcasting lines up on each output dim.

    Inputs are aligned from the right, as broadcasting does.  A dim where one input has
    slots and another tracked input has the same size but fixed channels freezes those
    slots.  Untracked inputs (constants, scalars) are assumed to broadcast.
    """
    skip = set(skip)
    ndim = len(out_shape)
    out: Dict[int, np.ndarray] = {}
    for dim in range(ndim):
        if dim in skip:
            continue
        carriers, fixed = [], False
        for inp in ins:
            if inp.channels is None or inp.shape is None:
                continue
            k = dim - (ndim - len(inp.shape))
            if k < 0 or inp.shape[k] == 1:
                continue
            slots = inp.channels.slots.get(k)
            if slots is None:
                fixed = True
            else:
                carriers.append(slots)
        if not carriers:
            continue
        if fixed:
            for slots in carriers:
                ctx.freeze(slots, 'fixed', node, f'combines channels on dim {dim} with a '
                           'tensor whose channels there cannot be pruned')
            continue
        for slots in carriers[1:]:
            ctx.bind(carriers[0], slots, f'{node.name()} combines channels elementwise')
        out[dim] = carriers[0]
    return out


def elementwise(ctx: TraceContext, node, ins: Sequence[InputInfo]) -> Outputs:
    """Binary/ternary elementwise ops (add, sub, mul, div, maximum, where, ...).

    Inputs of the same size on a dim share channels there: ``a + b`` binds ``a``'s
    channel i to ``b``'s channel i, so a residual block's two branches are pruned alike;
    ``x * se(x)`` binds the SE gate's output to ``x``.  A parameter operand (layer scale,
    position embedding) is bound too and then sliced with its group.  Under
    ``heads='width'`` a constant autograd does not track that varies along ``head_dim``
    (RoPE's ``cos``/``sin``) is followed to the rotary ``inv_freq`` (:func:`.heads.bind_rotary`).
    """
    shapes = output_shapes(node)
    out_shape = shapes[0]
    constants = heads.untracked_operands(ctx, node, ins)
    split = _shared_split(ctx, node, ins, len(out_shape))
    if split is not None and any(heads.varies_along(shape, split.dims, len(out_shape))
                                 for shape in constants):
        split = None  # a constant per head_dim position: read the heads to bind it
    if split is None:
        ins = [heads.settle(ctx, node, inp) for inp in ins]
    slots = bind_aligned(ctx, node, ins, out_shape, skip=split.dims if split else ())
    for shape in constants:
        heads.bind_rotary(ctx, node, slots, shape, len(out_shape))
    return [TensorChannels(out_shape, slots, split)] + [None] * (len(shapes) - 1)


def _shared_split(ctx: TraceContext, node, ins: Sequence[InputInfo], ndim: int):
    """The split the output of an elementwise op keeps, if every input with one has it
    on the same dims and shape (their grids are bound) and no other input has channels
    of its own there; else None (the caller reads the splits as heads)."""
    found = []
    for inp in ins:
        tc = inp.channels if inp.resolve is None else None
        if tc is not None and tc.split is not None:
            offset = ndim - tc.ndim
            found.append(tc.split.moved({d: d + offset for d in tc.split.dims}))
    if not found or any(f.dims != found[0].dims or f.grid.shape != found[0].grid.shape
                        for f in found):
        return None
    for inp in ins:
        if inp.shape is None or (inp.resolve is None and inp.channels is not None
                                 and inp.channels.split is not None):
            continue
        offset = ndim - len(inp.shape)
        if any(d - offset >= 0 and inp.shape[d - offset] != 1 for d in found[0].dims):
            return None
    for other in found[1:]:
        ctx.bind(found[0].grid.ravel(), other.grid.ravel(),
                 f'{node.name()} combines channels elementwise')
    return found[0]


def _reduced_dims(node, ndim: int):
    dims = getattr(node, '_saved_dim', None)
    if dims is None:
        return tuple(range(ndim)), False
    if isinstance(dims, int):
        dims = (dims, )
    dims = dims_tuple(dims, ndim) if len(dims) else tuple(range(ndim))
    return dims, bool(getattr(node, '_saved_keepdim', False))


def reduction(ctx: TraceContext, node, ins: Sequence[InputInfo]) -> Outputs:
    """Reductions (sum, mean, max, amax, var, norm) over some dims.

    Reducing over spatial dims (global pooling) keeps the channel slots.  A ``sum`` over
    a channel dim drops the dim: it stays exact after pruning where the removed terms are
    zero, which the pruner checks on the model (``ctx.summed``: an ``exp`` or ``+ 1``
    after the layer makes them non-zero); a ``mean``/``max``/``var`` over channels would
    change its value, so those channels are frozen.
    """
    x = ins[0].channels
    shapes = output_shapes(node)
    if x is None:
        return [None] * len(shapes)
    dims, keepdim = _reduced_dims(node, x.ndim)
    exact = node.name().startswith('Sum')
    slots = {}
    for dim, dim_slots in x.slots.items():
        if dim in dims:
            if exact:
                ctx.summed.update(dim_slots.tolist())
            else:
                ctx.freeze(dim_slots, 'mixing', node, f'reduces over channel dim {dim}')
            continue
        slots[dim if keepdim else dim - sum(1 for r in dims if r < dim)] = dim_slots
    return [TensorChannels(shapes[0], slots)] + [None] * (len(shapes) - 1)


def index_add(ctx: TraceContext, node, ins: Sequence[InputInfo]) -> Outputs:
    """``out.index_add(dim, index, source)``: ``source``'s rows added to the rows of
    ``out`` that ``index`` names, so on every other dim the two are bound as ``out +
    source`` binds them (a mixture of experts summing each expert's output into the
    tokens routed to it: :class:`razorlib.nn.SplitExperts`).  Channels on ``dim`` itself
    are gathered, so they freeze.
    """
    (out_shape, ) = output_shapes(node)
    dim = normalize_dim(node._saved_dim, len(out_shape))
    for inp in ins:
        if inp.channels is not None and dim in inp.channels.slots:
            ctx.freeze(inp.channels.slots[dim], 'mixing', node,
                       f'index_add gathers dim {dim} by an index tensor')
    return [TensorChannels(out_shape, bind_aligned(ctx, node, ins, out_shape, skip=(dim, )))]


def along_dim(ctx: TraceContext, node, ins: Sequence[InputInfo]) -> Outputs:
    """Ops that mix values along one dim (softmax, log_softmax, cumsum).

    Channels on that dim are frozen; slots on other dims pass through.
    """
    x = ins[0].channels
    shapes = output_shapes(node)
    if x is None:
        return [None] * len(shapes)
    (dim, ) = dims_tuple([node._saved_dim], x.ndim)
    slots = dict(x.slots)
    if dim in slots:
        ctx.freeze(slots.pop(dim), 'mixing', node, f'mixes values along channel dim {dim}')
    return [TensorChannels(shapes[0], slots)] + [None] * (len(shapes) - 1)


def matmul(ctx: TraceContext, node, ins: Sequence[InputInfo]) -> Outputs:
    """``a @ b`` between activations (``mm``, ``bmm``; nn.Linear has a layer rule).

    The contracted dim binds ``a``'s last-dim slots to ``b``'s first-dim slots (pruning
    one removes one product term from every output, exactly where one of its factors is
    zero in the masked model: ``ctx.summed``, checked by the pruner); the output takes ``a``'s
    row slots and ``b``'s column slots; bmm's batch dim binds like an elementwise op,
    or, where it holds attention heads, as attention pairs them
    (:func:`~.heads.pair_heads`: grouped-query attention's repeated key/value heads;
    :func:`~.heads.lone_head_product`: one query head over a single key/value head).
    """
    (out_shape, ) = output_shapes(node)
    a, b = ins[0], ins[1]
    out: Dict[int, np.ndarray] = {}
    nd = len(out_shape)
    if nd == 3:
        heads.bind_single_head_positions(ctx, node, b.channels, 0, out_shape[0])
        batch_a, batch_b = _dim_slots(a, 0), _dim_slots(b, 0)
        lone = heads.lone_head_product(ctx, node, a, b) \
            if batch_a is None and batch_b is None else None
        if lone is not None:  # one query head over a single key/value head
            a, b = lone
        single = None if batch_a is None or batch_b is not None else \
            heads.repeated_head(ctx, node, b.channels, 0, len(batch_a))
        if single is not None:  # multi-query attention: b's channels are its one head
            out[0] = heads.pair_single_head(ctx, node, batch_a, *single)
            b = InputInfo(b.node, b.output_nr, b.shape, TensorChannels(b.channels.shape))
        elif batch_a is None or batch_b is None or out_shape[0] == 1:
            out.update(bind_aligned(ctx, node, [_only_dim(a, 0), _only_dim(b, 0)],
                                    out_shape[:1]))
        else:
            out[0] = heads.pair_heads(ctx, node, batch_a, batch_b,
                                      f'{node.name()} combines channels elementwise')
    contracted = [_dim_slots(a, -1), _dim_slots(b, -2)]
    known = [s for s in contracted if s is not None]
    if len(known) == 2:
        ctx.bind(known[0], known[1], f'{node.name()} contracts these channels')
        ctx.summed.update(known[0].tolist())
    elif known:
        ctx.freeze(known[0], 'fixed', node, 'contracts channels with a tensor whose '
                   'channels cannot be pruned')
    rows, cols = _dim_slots(a, -2), _dim_slots(b, -1)
    if rows is not None:
        out[nd - 2] = rows
    if cols is not None:
        out[nd - 1] = cols
    return [TensorChannels(out_shape, out)]


def _dim_slots(inp: InputInfo, dim: int) -> Optional[np.ndarray]:
    if inp.channels is None:
        return None
    return inp.channels.slots.get(dim % inp.channels.ndim)


def _only_dim(inp: InputInfo, dim: int) -> InputInfo:
    """A view of ``inp`` reduced to one dim, for batch-dim binding."""
    if inp.channels is None:
        return inp
    tc = inp.channels
    slots = {0: tc.slots[dim]} if dim in tc.slots else {}
    return InputInfo(inp.node, inp.output_nr, (tc.shape[dim], ), TensorChannels(
        (tc.shape[dim], ), slots))


def mixing(ctx: TraceContext, node, ins: Sequence[InputInfo], why: str = '') -> Outputs:
    """Ops known to mix channels in ways that cannot be sliced: all their channels freeze.

    Example: ``x[:, idx]`` (advanced indexing), ``pixel_shuffle``, ``glu``.
    """
    ctx.freeze_all(ins, 'mixing', node, why or 'mixes channels in a way razorlib cannot slice')
    return opaque(node)


def unknown(ctx: TraceContext, node, ins: Sequence[InputInfo]) -> Outputs:
    """Fallback for grad_fns missing from the table: freeze what reaches them.

    A parameter input is frozen after the walk, named, with the axes of the layer that
    owns it (``literal_sizes.freeze_params_of_opaque_ops``).
    """
    ctx.freeze_all([inp for inp in ins if inp.resolve is None], 'unknown-op', node,
                   'this grad_fn is not in the channel rule table')
    return opaque(node)
