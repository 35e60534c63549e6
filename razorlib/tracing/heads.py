"""Attention heads: channels a reshape splits into (heads, head_dim), and the ops that read them.

``q_proj(x).view(B, N, -1, head_dim)`` splits a layer's channels into a grid
(:class:`~.channels.Split`).  The reshape cannot tell what the grid means; its reader can:

- merged back after a permute (a channel shuffle, or its inverse), every block along the
  axes the code sized with numbers of its own keeps the same pattern, so the code's fixed
  group count still splits the slim tensor right (:func:`merge`);
- read by anything else (``q @ k.transpose(-2, -1)``, softmax, scaled dot-product
  attention, RoPE's half slices), each row is a *head*: its ``head_dim`` channels are
  bound into one class, so whole heads are kept or pruned, and ``head_dim`` stays whole
  (:func:`read_as_heads`).

The matrix products then bind heads the way attention pairs them: ``q @ k^T`` and
``attn @ v`` bind head ``h`` of each operand (their batch dims), and grouped-query
attention's ``repeat_kv`` (an expand and a merge) repeats each key/value head's slot
over its query heads, so a kv head and its query heads form one class.  With
``trace(..., gqa='query')`` the key/value heads stay whole instead and each kv group
keeps the same query heads (:func:`pair_heads`).  A single key/value head (multi-query
attention) is viewed with a one-head axis, which carries no channels; its ``expand``
over the query heads (``repeat_kv``, a broadcast) is marked as a repeat of one head
(:class:`~.channels.TensorChannels` ``repeats``), so attention reads its channels as that
head (:func:`pair_single_head`): under ``gqa='query'`` it stays whole and the query
heads prune freely, under ``gqa='kv'`` the attention stays whole.  Under ``gqa='query'``
a query left with one head is viewed with a size-1 head axis too: it is read as that
head (:func:`read_lone_query_head`, :func:`lone_head_product`), so the key/value head
stays whole and the lone query head with it.

With ``trace(..., heads='width')`` a split read by attention prunes ``head_dim`` instead:
position ``j`` of every head is one class (and of ``q``, ``k`` and ``v`` of one module,
viewed by one ``head_dim``), the head dim carries no channels.  ``q @ k^T`` binds the
contracted positions, ``attn @ v`` carries ``v``'s to the output, merged back into
``o_proj``'s input once per head.  RoPE's ``rotate_half`` slices bind ``i`` with
``i + d/2`` (``shape_rules.slice_``), and ``cos``/``sin`` made under ``no_grad`` are
followed to the rotary ``inv_freq`` (:func:`bind_rotary`).  A single key/value head's
view with a one-head axis makes its channels that head's positions
(:func:`view_as_one_head`), bound to its module's other heads'.
"""
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..layers.common import bind_blocks
from .channels import InputInfo, Split, TensorChannels
from .context import ROTARY_BUFFERS, TraceContext, output_shapes
from .slots import KEPT


def split_channels(slots: np.ndarray, dims: Sequence[int], sizes: Sequence[int],
                   own: Sequence[bool] = ()) -> Tuple[Dict[int, np.ndarray], Optional[Split]]:
    """Slots of one channel dim that a reshape splits over ``dims`` (of ``sizes``); ``own``
    says, where known, whether the code gave each size as a number of its own
    (:attr:`.channels.Split.fixed`).

    A grid axis along which every slice holds the same slots only repeats them (the
    batch of a ``(B * heads) -> (B, heads)`` view in a batched product): it carries no
    channels.  One axis left is a plain channel dim; more make a :class:`Split`.

    Returns:
        ``({dim: slots}, None)`` or ``({}, split)``.
    """
    grid = slots.reshape(tuple(sizes))
    keep = []
    for axis in range(grid.ndim):
        first = np.take(grid, [0], axis=axis)
        if not (np.take(grid, range(1, grid.shape[axis]), axis=axis) == first).all():
            keep.append(axis)
    if not keep:  # one slot everywhere
        keep = [0]
    index = tuple(slice(None) if axis in keep else 0 for axis in range(grid.ndim))
    grid = grid[index]
    kept_dims = tuple(dims[axis] for axis in keep)
    if len(kept_dims) == 1:
        return {kept_dims[0]: grid}, None
    return {}, Split(kept_dims, grid, _fixed([own[axis] for axis in keep] if own else []))


def _fixed(own: Sequence[bool]) -> Optional[Tuple[int, ...]]:
    """:attr:`.channels.Split.fixed` of grid axes sized so (``own``): None unless some,
    not all, are the code's own numbers."""
    fixed = tuple(axis for axis, given in enumerate(own) if given)
    return fixed if 0 < len(fixed) < len(own) else None


def read_as_heads(ctx: TraceContext, node, tc: TensorChannels) -> TensorChannels:
    """``tc`` with its split read as heads: each row's channels bound into one class,
    the head dim carrying one slot per head and ``head_dim`` no channels.  Under
    ``heads='width'`` the rows are bound elementwise instead (position ``j`` of every
    head is one class): the head dim carries no channels and ``head_dim`` the slots.

    A split over three or more dims that is read before it was narrowed to two (by a
    ``select`` or ``unbind`` of its leading axis) cannot be sliced; it freezes.
    """
    split = tc.split
    if split is None:
        return tc
    slots = dict(tc.slots)
    if split.grid.ndim == 2 and ctx.heads == 'width':
        heads, width = split.grid.shape
        ctx.bind(np.tile(split.grid[0], heads - 1), split.grid[1:].ravel(),
                 f'{node.name()} reads channels split by a reshape as {heads} heads of '
                 f'{width}, each pruned at the same head_dim positions')
        slots[split.dims[1]] = split.grid[0]
        ctx.head_width.update(split.grid[0].tolist())
        _bind_module_positions(ctx, node, split.grid[0])
    elif split.grid.ndim == 2:
        heads, width = split.grid.shape
        ctx.bind(np.repeat(split.grid[:, 0], width - 1), split.grid[:, 1:].ravel(),
                 f'{node.name()} reads channels split by a reshape as {heads} heads of '
                 f'{width}')
        slots[split.dims[0]] = split.grid[:, 0]
        ctx.whole_heads.update(split.grid.ravel().tolist())
    else:
        ctx.freeze(split.grid.ravel(), 'mixing', node,
                   f'channels split by a reshape into a {"x".join(map(str, split.grid.shape))}'
                   ' grid reach this op before being narrowed to heads or merged back')
    return TensorChannels(tc.shape, slots)


def _bind_module_positions(ctx: TraceContext, node, positions: np.ndarray) -> None:
    """Bind the ``head_dim`` positions of every split of one attention module's layers
    (``q``, ``k`` and ``v``): its code views them all by one ``head_dim``, so they keep
    the same positions.  The module is the parent of the layer the channels come from."""
    source = ctx.slots.source_of(int(positions[0]))
    owner = source.name.rpartition('.')[0] if source is not None else ''
    first = ctx.head_positions.setdefault((owner, len(positions)), positions)
    ctx.bind(first, positions, f'{node.name()}: the heads of {owner or "the model"} are viewed '
             f'by one head_dim of {len(positions)}, so they keep the same positions')


def view_as_one_head(ctx: TraceContext, node, x: TensorChannels, out_shape: Sequence[int],
                     dim: int, out_dim: int) -> None:
    """Under ``heads='width'``: a reshape that views the last channel dim as one head,
    ``(B, N, head_dim) -> (B, N, 1, head_dim)`` (multi-query attention's key/value head),
    makes its channels that head's positions, as :func:`read_as_heads` makes a split's:
    RoPE's slices and frequencies then pair them (:func:`bind_rotary`), and they keep the
    positions of their module's other heads.  (A size-1 axis carries no channels, so the
    view makes no split.)"""
    if ctx.heads != 'width' or out_dim != len(out_shape) - 1 or dim != x.ndim - 1 \
            or out_dim == 0 or out_shape[out_dim - 1] != 1 \
            or sum(size == 1 for size in out_shape) <= sum(size == 1 for size in x.shape):
        return
    positions = x.slots[dim]
    ctx.head_width.update(positions.tolist())
    _bind_module_positions(ctx, node, positions)


def settle(ctx: TraceContext, node, inp: InputInfo) -> InputInfo:
    """``inp`` with its split read as heads, for rules that do not handle splits."""
    if inp.resolve is not None:  # a parameter leaf: never split, and left unresolved
        return inp
    tc = inp.channels
    if tc is None or tc.split is None:
        return inp
    return InputInfo(inp.node, inp.output_nr, inp.shape, read_as_heads(ctx, node, tc),
                     inp.param, inp.tensor)


def merge(ctx: TraceContext, node, split: Split, order: Sequence[int]) -> np.ndarray:
    """Slots of the channel dim a reshape makes by merging a split's dims back, in the
    tensor order ``order`` (the split's dims as they now sit).

    Merged in the order they were split, the channels are just where they were.  In
    another order (a channel shuffle's ``transpose``), the slim code must still see a
    full grid, whose axes of the code's own sizes (:attr:`.channels.Split.fixed`) keep
    their size: every block along them keeps the same channels, so the blocks are bound
    elementwise.  A shuffle's ``view(b, g, c // g, h, w)`` keeps ``g`` rows of fewer
    channels each, its inverse's ``view(b, c // g, g, h, w)`` fewer whole rows of ``g``.
    Where that is not known, the leading axis is the fixed one (ShuffleNet's group count),
    which the pruner checks by comparing the slim model with the masked one.
    """
    axes = [split.dims.index(d) for d in order]
    grid = split.grid
    if axes != sorted(axes):
        fixed = split.fixed or (0, )
        blocks = np.moveaxis(grid, fixed, range(len(fixed)))
        blocks = blocks.reshape(int(np.prod([grid.shape[a] for a in fixed])), -1)
        ctx.bind(np.tile(blocks[0], len(blocks) - 1), blocks[1:].ravel(),
                 f'{node.name()} shuffles channels split into {len(blocks)} blocks')
    return np.transpose(grid, axes).ravel()


def select_axis(ctx: TraceContext, node, split: Split, dim: int,
                count: int) -> List[Tuple[Dict[int, np.ndarray], Optional[Split]]]:
    """The splits of ``count`` pieces that pick index 0, 1, ... of the split's ``dim``
    (``qkv.unbind(0)`` of ``reshape(B, N, 3, heads, head_dim)``).

    The code picks the pieces by fixed index, so each must keep the same channels: the
    slices are bound elementwise.  Each piece loses ``dim`` (the caller renumbers).
    """
    axis = split.dims.index(dim)
    pieces = [np.take(split.grid, i, axis=axis) for i in range(count)]
    for piece in pieces[1:]:
        ctx.bind(pieces[0].ravel(), piece.ravel(),
                 f'{node.name()} picks channels split by a reshape by a fixed index')
    dims = tuple(d - (d > dim) for d in split.dims if d != dim)
    own = [a in split.fixed for a in range(split.grid.ndim) if a != axis] \
        if split.fixed is not None else []
    out = []
    for piece in pieces:
        if piece.ndim == 1:
            out.append(({dims[0]: piece}, None))
        else:
            out.append(({}, Split(dims, piece, _fixed(own))))
    return out


def query_groups(a: np.ndarray, b: np.ndarray) -> Optional[Tuple[int, np.ndarray, np.ndarray]]:
    """How grouped-query attention pairs head slots ``a[i]`` with ``b[i]``, if it does.

    One side (the key/value heads) repeats each of its slots over an equal number (more
    than one) of the other side's distinct slots (the query heads); a batch dim merged
    into the heads only repeats the pairs.

    Returns:
        ``(side, kv, grid)``: ``side`` 0 if ``a`` holds the query heads, 1 if ``b`` does;
        the key/value slots in order; the query slots as a ``(kv heads, groups)`` grid,
        row ``j`` the query heads of key/value head ``j`` in order.  None where the
        pairing is one to one or uneven.

    Example:
        >>> side, kv, grid = query_groups(np.arange(8) % 4, np.array([8, 8, 9, 9] * 2))
        >>> side, kv.tolist(), grid.tolist()
        (0, [8, 9], [[0, 1], [2, 3]])
    """
    pairs = np.stack([a, b], axis=1)
    _, first = np.unique(pairs, axis=0, return_index=True)
    pairs = pairs[np.sort(first)]
    for side in (0, 1):
        query, kv = pairs[:, side], pairs[:, 1 - side]
        kv_heads, first = np.unique(kv, return_index=True)
        if len(np.unique(query)) != len(query) or len(kv_heads) == len(query):
            continue  # a query head paired twice, or one query head per kv head
        order = kv[np.sort(first)]
        rows = [query[kv == head] for head in order]
        if all(len(row) == len(rows[0]) for row in rows):
            return side, order, np.stack(rows)
    return None


def pair_heads(ctx: TraceContext, node, a: np.ndarray, b: np.ndarray, reason: str) -> np.ndarray:
    """Bind the head slots an attention product pairs, ``a[i]`` with ``b[i]`` (``q @ k^T``,
    ``attn @ v``, scaled dot-product attention); returns the slots its output's head dim
    carries.

    By default (``gqa='kv'``) each pair is bound (``reason``): under grouped-query
    attention a key/value head and its query heads form one class.  With ``gqa='query'``
    the key/value heads are kept whole (reason kind :data:`~.slots.KEPT`: where the layer
    that computes them computes the queries too, Phi-3's ``qkv_proj``, its query heads
    still prune), and the query heads are bound blockwise, position
    ``i`` of every key/value group together (:func:`~razorlib.layers.common.bind_blocks`,
    as a GroupNorm's groups): every group keeps the same query heads, so the slim
    ``repeat_kv`` (or ``enable_gqa``) still pairs them right with fewer per group.
    """
    found = query_groups(a, b) if ctx.gqa == 'query' else None
    if found is None:
        ctx.bind(a, b, reason)
        return a
    side, kv, grid = found
    kv_heads, groups = grid.shape
    ctx.freeze(kv, KEPT, node, f"gqa='query' keeps key/value heads whole ({kv_heads} "
               f'key/value heads of {groups} query heads each)')
    bind_blocks(ctx, grid.ravel(), kv_heads, f'{node.name()} prunes the same query heads in '
                f'each of {kv_heads} key/value groups')
    return (a, b)[side]


def head_slot(ctx: TraceContext, node, tc: TensorChannels) -> int:
    """The slot that stands for ``tc`` as one head: the first of its one channel dim, or,
    with none (its channels fixed), a fresh fixed slot."""
    if tc.slots:
        (channels, ) = tc.slots.values()
        return int(channels[0])
    return int(ctx.external(1, node, 'a repeated head whose channels are fixed')[0])


def repeated_head(ctx: TraceContext, node, tc: Optional[TensorChannels], dim: int,
                  count: int) -> Optional[Tuple[np.ndarray, np.ndarray]]:
    """``(head slots, channels)`` of a tensor that holds one head ``count`` times along
    ``dim``, or None: the head slot repeated, and the head's channels (its ``head_dim``;
    none where they are fixed).

    Multi-query attention's single key/value head: its tensor has at most one channel
    dim, the head's, and along the head dim either an ``expand`` of it
    (:class:`~.channels.TensorChannels` ``repeats``: ``repeat_kv``, or a matrix product
    broadcasting it) or a size-1 axis that attention broadcasts itself (SDPA's
    ``enable_gqa``).

    Example:
        >>> k = TensorChannels((2, 1, 6, 4), {3: np.arange(4)})
        >>> single, channels = repeated_head(None, None, k, 1, 8)
        >>> single.tolist(), channels.tolist()
        ([0, 0, 0, 0, 0, 0, 0, 0], [0, 1, 2, 3])
    """
    if tc is None or tc.split is not None or dim in tc.slots or len(tc.slots) > 1:
        return None
    channels = next(iter(tc.slots.values()), np.zeros(0, dtype=np.int64))
    if dim in tc.repeats:
        single = tc.repeats[dim]
    elif tc.shape[dim] == 1:
        single = np.full(count, head_slot(ctx, node, tc))
    else:
        return None
    if len(single) != count or (single != single[0]).any() or \
            (len(channels) and single[0] not in channels):
        return None
    return single, channels


def pair_single_head(ctx: TraceContext, node, query: np.ndarray, single: np.ndarray,
                     channels: np.ndarray) -> np.ndarray:
    """Pair query heads with one key/value head repeated over them (multi-query
    attention, :func:`repeated_head`); returns the slots the output's head dim carries.

    The key/value head's ``channels`` are read as one head, bound to its head slot, as
    :func:`read_as_heads` binds every head's.  With ``gqa='query'`` that head stays whole
    (reason kind :data:`~.slots.KEPT`, also where one layer computes it and the queries:
    GPTBigCode's ``c_attn``) and the query heads prune freely: ``repeat_kv`` (or a
    broadcast) repeats it over as many query heads as the slim model keeps
    (``num_key_value_groups`` follows the projections' widths).  With ``gqa='kv'`` a
    key/value head is pruned with its query heads, which here would remove the
    attention: it stays whole, saying so.
    """
    head = single[0]
    count = len(np.unique(query))
    if ctx.gqa == 'query':
        keep_single_head(ctx, node, channels, head, count)
    else:
        _read_as_one_head(ctx, node, channels, head, 'key/value')
        ctx.freeze(np.append(query, head), 'fixed', node, (
            f'{count} query heads over a single key/value head (multi-query attention): '
            "gqa='kv' prunes a key/value head with its query heads, which would remove the "
            "attention, so it stays whole; gqa='query' prunes the query heads"))
    return query


def _read_as_one_head(ctx: TraceContext, node, channels: np.ndarray, head: int,
                      what: str) -> None:
    """Bind ``channels`` to ``head``, one of them or a slot standing for them: one class,
    kept or pruned whole, as :func:`read_as_heads` binds a head's."""
    ctx.bind(np.full(int((channels != head).sum()), head), channels[channels != head],
             f'{node.name()} reads {len(channels)} channels as one {what} head')


def keep_single_head(ctx: TraceContext, node, channels: np.ndarray, head: int,
                     count: int) -> None:
    """Under ``gqa='query'``: a single key/value head over ``count`` query heads, its
    ``channels`` read as the head ``head`` and kept whole (reason kind
    :data:`~.slots.KEPT`)."""
    _read_as_one_head(ctx, node, channels, head, 'key/value')
    plural = 's' if count != 1 else ''
    ctx.freeze(np.array([head], dtype=np.int64), KEPT, node,
               "gqa='query' keeps the key/value head whole (multi-query attention: one "
               f'key/value head of {count} query head{plural})')


def _one_head_view(tc: Optional[TensorChannels], dim: int) -> bool:
    """Whether ``tc`` holds one head along a size-1 ``dim``: no split, no channels on
    ``dim`` and at most one channel dim, the head's."""
    return tc is not None and tc.split is None and tc.shape[dim] == 1 and \
        dim not in tc.slots and len(tc.slots) <= 1


def read_lone_query_head(ctx: TraceContext, node, q: TensorChannels, dim: int,
                         kv: Sequence[TensorChannels]) -> TensorChannels:
    """Under ``gqa='query'`` (and ``heads='whole'``), a query viewed with a size-1 head
    axis ``dim`` over key and value tensors that hold one head each (``kv``), read as
    that one head: its channels bound into one class, whose slot ``dim`` carries; any
    other query as it is.

    A multi-query attention pruned to one query head (GPTBigCode's ``c_attn``) views its
    queries so, and a size-1 axis carries no channels: nothing would read them as a
    head, the contraction with the key head kept whole would offer the lone head's
    ``head_dim`` positions, and slicing the fused projection refuses them.  Read as a
    head, the query pairs with the single key/value head as more query heads do
    (:func:`pair_single_head`): that head stays whole, and the one query head left
    beside it cannot prune.
    """
    if ctx.gqa != 'query' or ctx.heads != 'whole' or not q.slots or \
            not all(_one_head_view(tc, dim) for tc in (q, *kv)):
        return q
    (channels, ) = q.slots.values()
    _read_as_one_head(ctx, node, channels, channels[0], 'query')
    return TensorChannels(q.shape, {dim: channels[:1]})


def merged_from_one_head(inp: InputInfo) -> bool:
    """Whether an operand of a batched product is a ``(B, 1, X, Y)`` tensor that
    ``torch.matmul`` merged into ``(B, X, Y)``: attention over one head, viewed with a
    size-1 head axis (the merging view keeps the sizes it was given)."""
    sizes = getattr(inp.node, '_saved_self_sym_sizes', None)
    return sizes is not None and inp.shape is not None and len(sizes) == 4 and \
        sizes[1] == 1 and tuple(inp.shape) == (sizes[0], *sizes[2:])


def lone_head_product(ctx: TraceContext, node, a: InputInfo,
                      b: InputInfo) -> Optional[Tuple[InputInfo, InputInfo]]:
    """Under ``gqa='query'`` (and ``heads='whole'``), a batched product of two operands
    :func:`merged_from_one_head` (``q @ k^T``, ``attn @ v`` of one query head over a
    single key/value head): ``b``'s channels read as the key/value head and kept whole,
    ``a``'s (the query's ``head_dim``, if any) as the query head; both returned without
    their channels.  None for any other product.

    The merge drops the size-1 head axis, so without this the product is a plain one:
    the query's positions would be bound to the kept key head's and offered to pruning,
    which slicing a fused projection refuses (:func:`read_lone_query_head` does the same
    for scaled dot-product attention).
    """
    if ctx.gqa != 'query' or ctx.heads != 'whole' or \
            not (merged_from_one_head(a) and merged_from_one_head(b)):
        return None
    query, kv = a.channels, b.channels
    if kv is None or kv.split is not None or len(kv.slots) != 1 or query is not None and (
            query.split is not None or set(query.slots) - {2}):
        return None
    (channels, ) = kv.slots.values()
    keep_single_head(ctx, node, channels, int(channels[0]), 1)
    if query is not None and query.slots:
        _read_as_one_head(ctx, node, query.slots[2], int(query.slots[2][0]), 'query')
    return _without_channels(a), _without_channels(b)


def _without_channels(inp: InputInfo) -> InputInfo:
    """``inp`` with no channel slots (read as heads elsewhere)."""
    if inp.channels is None:
        return inp
    return InputInfo(inp.node, inp.output_nr, inp.shape, TensorChannels(inp.channels.shape))


def bind_single_head_positions(ctx: TraceContext, node, tc: Optional[TensorChannels],
                               dim: int, count: int) -> None:
    """Under ``heads='width'``: a single key/value head repeated ``count`` times along
    ``dim`` (:func:`repeated_head`) keeps the ``head_dim`` positions of its module's other
    heads, which its code views by the same ``head_dim``, as :func:`read_as_heads` binds a
    split's."""
    found = repeated_head(ctx, node, tc, dim, count) if ctx.heads == 'width' else None
    if found is not None and len(found[1]):
        _bind_module_positions(ctx, node, found[1])


def untracked_operands(ctx: TraceContext, node, ins: Sequence[InputInfo]) -> List[Tuple[int, ...]]:
    """Shapes of the operands of a product or quotient that autograd does not track
    (computed under ``no_grad``, as RoPE's ``cos``/``sin`` are), under ``heads='width'``;
    empty otherwise.  The node saves them for its backward."""
    if ctx.heads != 'width':
        return []
    shapes = []
    for inp, saved in zip(ins, ('_saved_self', '_saved_other')):
        if inp.channels is None and inp.resolve is None:
            try:
                tensor = getattr(node, saved)
            except (AttributeError, RuntimeError):
                continue
            if tensor is not None and tensor.dim():
                shapes.append(tuple(tensor.shape))
    return shapes


def varies_along(shape: Sequence[int], dims: Sequence[int], ndim: int) -> bool:
    """Whether a tensor of ``shape``, broadcast to ``ndim`` dims, has more than one value
    along any of ``dims``."""
    offset = ndim - len(shape)
    return any(d >= offset and shape[d - offset] > 1 for d in dims)


def bind_rotary(ctx: TraceContext, node, slots: Dict[int, np.ndarray], shape: Sequence[int],
                ndim: int) -> None:
    """Follow a constant of ``shape`` that multiplies ``head_dim`` positions to the buffers
    it was computed from.

    RoPE's ``cos``/``sin`` are ``cat(freqs, freqs)`` of ``positions * inv_freq``, made
    under ``no_grad``: position ``i`` and ``i + d/2`` use ``inv_freq[i]``.  Each rotary
    buffer of ``d/2`` entries (:data:`ROTARY_BUFFERS`) is bound so, and sliced with
    ``head_dim``: the slim model keeps the kept positions' frequencies.  With no such
    buffer the positions freeze.  (The pruner checks the slim model's outputs against
    the masked model's under ``heads='width'``: another layout would be caught there.)
    """
    for dim, dim_slots in slots.items():
        if not varies_along(shape, [dim], ndim) or not ctx.is_head_width(dim_slots):
            continue
        width = len(dim_slots)
        found = [(name, attr) for name, module in ctx.modules.items()
                 for attr in ROTARY_BUFFERS
                 if getattr(module._buffers.get(attr), 'shape', None) == (width // 2, )]
        if width % 2 or not found:
            ctx.freeze(dim_slots, 'fixed', node, f'multiplies {width} head_dim positions by a '
                       'constant autograd does not track that is no rotary inv_freq of '
                       f'{width // 2} entries (one of {ROTARY_BUFFERS})')
            continue
        for name, attr in found:
            freqs = ctx.buffer_slots(name, attr)
            reason = f'{node.name()} rotates head_dim positions by {name}.{attr}'
            ctx.bind(freqs, dim_slots[:width // 2], reason)
            ctx.bind(freqs, dim_slots[width // 2:], reason)


def scaled_dot_product_attention(ctx: TraceContext, node,
                                 ins: Sequence[InputInfo]) -> List[TensorChannels]:
    """``F.scaled_dot_product_attention(q, k, v)`` on ``(B, heads, N, head_dim)``.

    Head ``h`` of ``q`` goes with head ``h`` of ``k`` and ``v``; with fewer key/value
    heads (``enable_gqa``), with head ``h // (heads // kv_heads)`` (:func:`pair_heads`);
    with one key/value head, with that head (:func:`pair_single_head`).  The contracted
    ``head_dim`` of ``q`` and ``k`` is bound; the output has ``q``'s heads and ``v``'s
    value channels.  A mask with channels of its own freezes them.
    """
    shapes = output_shapes(node)
    q, k, v = (inp.channels for inp in ins[:3])
    for extra in ins[3:]:
        if extra.channels is not None and extra.resolve is None:
            ctx.freeze(extra.channels.all_slots(), 'fixed', node,
                       'an attention mask with channels of its own')
    if q is None or k is None or v is None:
        ctx.freeze_all(ins[:3], 'fixed', node, 'attention over a tensor razorlib does not '
                       'track (a model input or a constant)')
        return [TensorChannels(shape) for shape in shapes]
    if q.slots.get(1) is None:
        q = read_lone_query_head(ctx, node, q, 1, (k, v))
    heads = q.slots.get(1)
    kv_heads = [tc.slots.get(1) for tc in (k, v)]
    for tc in (k, v):
        bind_single_head_positions(ctx, node, tc, 1, q.shape[1])
    singles = [repeated_head(ctx, node, tc, 1, len(heads)) if heads is not None else None
               for tc in (k, v)]
    if all(single is not None for single in singles):
        for single, channels in singles:
            heads = pair_single_head(ctx, node, heads, single, channels)
        k, v = (TensorChannels(tc.shape) for tc in (k, v))
    elif heads is not None and all(s is not None for s in kv_heads):
        for kv in kv_heads:
            groups = len(heads) // len(kv)
            if len(heads) != groups * len(kv):
                ctx.freeze(np.concatenate([heads, kv]), 'shape', node,
                           f'{len(heads)} query heads over {len(kv)} key/value heads')
                continue
            heads = pair_heads(ctx, node, heads, np.repeat(kv, groups),
                               f'{node.name()} pairs each query head with its key/value head')
    else:
        for tc in (q, k, v):
            if tc.slots.get(1) is not None:
                ctx.freeze(tc.slots[1], 'fixed', node,
                           'attention between heads that can be pruned and heads that cannot')
        heads = None
    qd, kd = q.slots.get(3), k.slots.get(3)
    if qd is not None and kd is not None:
        ctx.bind(qd, kd, f'{node.name()} contracts these channels')
        if ctx.heads == 'width' and getattr(node, '_saved_scale', 0.0) is None:
            ctx.freeze(qd, 'fixed', node, "scales by 1 / sqrt(head_dim) (no scale= given): "
                       "a slim head_dim would change the scale; pass scale= to prune it")
    else:
        for slots in (qd, kd):
            if slots is not None:
                ctx.freeze(slots, 'fixed', node, 'contracts channels with a tensor whose '
                           'channels cannot be pruned')
    slots = {}
    if heads is not None:
        slots[1] = heads
    if v.slots.get(3) is not None:
        slots[3] = v.slots[3]
    return [TensorChannels(shapes[0], slots)] + [None] * (len(shapes) - 1)
