"""Channel rules for ops that move channels between dims or index into them.

Reshape, permute, channel shuffle, expand, repeat, concat, split/chunk, slice, select,
unbind, stack, flip and roll: each keeps track of which dim holds which slots, using the
offsets the op applies.
"""
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import heads
from .basic_rules import Outputs, bind_aligned, mixing, opaque, pass_through, signed
from .channels import InputInfo, Split, TensorChannels
from .context import TraceContext, normalize_dim, output_shapes
from .slots import KEPT


def permute(ctx: TraceContext, node, ins: Sequence[InputInfo]) -> Outputs:
    """permute / transpose / ``.t()``: slots follow their dim.

    Example: in ConvNeXt, ``x.permute(0, 2, 3, 1)`` moves the conv's channel slots from
    dim 1 to dim 3, where the LayerNorm and Linear layers read them.
    """
    x = ins[0].channels
    (out_shape, ) = output_shapes(node)
    if x is None:
        return [None]
    ndim = len(out_shape)
    order = list(range(ndim))
    name = node.name()
    if name == 'PermuteBackward0':
        order = [normalize_dim(d, ndim) for d in node._saved_dims]
    elif name == 'TransposeBackward0':
        d0, d1 = (normalize_dim(d, ndim) for d in (node._saved_dim0, node._saved_dim1))
        order[d0], order[d1] = order[d1], order[d0]
    elif ndim == 2:  # TBackward0
        order = [1, 0]
    position = {old: new for new, old in enumerate(order)}
    slots = {position[d]: s for d, s in x.slots.items()}
    repeats = {position[d]: r for d, r in x.repeats.items()}
    return [TensorChannels(out_shape, slots, x.split and x.split.moved(position), repeats)]


def channel_shuffle(ctx: TraceContext, node, ins: Sequence[InputInfo]) -> Outputs:
    """``torch.channel_shuffle(x, g)`` (``nn.ChannelShuffle``): the permutation
    ``x.view(b, g, c // g, ...).transpose(1, 2).reshape(b, c, ...)``, traced as that
    view's split merged back after the transpose (:func:`heads.merge`), with ``g`` a
    number of the code's own: every group keeps the same channels, so the slim
    ``channel_shuffle(x, g)`` still splits the kept ones into ``g`` equal groups.  Other
    dims keep their slots.
    """
    x = ins[0].channels
    (out_shape, ) = output_shapes(node)
    if x is None:
        return [None]
    slots = dict(x.slots)
    if 1 in slots:
        grid = slots[1].reshape(int(node._saved_groups), -1)
        # view(b, g, c // g, ...) splits dim 1 over dims 1, 2; transpose(1, 2) swaps them
        slots[1] = heads.merge(ctx, node, Split((2, 1), grid, fixed=(0, )), (1, 2))
    return [TensorChannels(out_shape, slots)]


def reshape_groups(in_shape: Sequence[int],
                   out_shape: Sequence[int]) -> List[Tuple[List[int], List[int]]]:
    """Pair up input and output dims of a reshape into minimal groups of equal product.

    Size-1 dims belong to no group.  Shapes whose dims cannot be so paired, or whose
    element counts differ (dims left over on either side), raise a ``ValueError``.

    >>> reshape_groups((2, 8, 4, 4), (2, 128))
    [([0], [0]), ([1, 2, 3], [1])]
    >>> reshape_groups((3, 4, 2), (3, 4))
    Traceback (most recent call last):
    ...
    ValueError: cannot align reshape (3, 4, 2) -> (3, 4)
    """
    ins = [d for d, size in enumerate(in_shape) if size != 1]
    outs = [d for d, size in enumerate(out_shape) if size != 1]
    groups, i, j = [], 0, 0
    while i < len(ins) and j < len(outs):
        gi, go = [ins[i]], [outs[j]]
        pi, po = in_shape[ins[i]], out_shape[outs[j]]
        i, j = i + 1, j + 1
        while pi != po:
            if pi < po and i < len(ins):
                gi.append(ins[i])
                pi *= in_shape[ins[i]]
                i += 1
            elif po < pi and j < len(outs):
                go.append(outs[j])
                po *= out_shape[outs[j]]
                j += 1
            else:
                raise ValueError(f'cannot align reshape {tuple(in_shape)} -> {tuple(out_shape)}')
        groups.append((gi, go))
    if i < len(ins) or j < len(outs):
        raise ValueError(f'cannot align reshape {tuple(in_shape)} -> {tuple(out_shape)}')
    return groups


def reshape(ctx: TraceContext, node, ins: Sequence[InputInfo]) -> Outputs:
    """view / reshape / flatten / squeeze / unsqueeze.

    - A channel dim merged with non-channel dims keeps its slots, repeated: flattening
      ``C x H x W`` for a Linear gives each channel ``H*W`` features.
    - A channel dim split over several dims (``view(B, N, heads, head_dim)``, a channel
      shuffle's ``view(b, g, c // g, h, w)``) becomes a split (``tracing/heads.py``),
      which later ops read as heads or merge back; it notes which of its sizes the code
      gave as numbers of its own (``g``), not from the widths (``-1``, ``c // g`` of a
      ``c`` read from the tensor), for a merge to keep those.
    - A split's dims merged back together give the channels in their new order; merged
      with other dims, the split is first read as heads.
    - A merge of two channel dims, or any other regrouping of channel dims, freezes them.
    """
    x = ins[0].channels
    (out_shape, ) = output_shapes(node)
    if x is None:
        return [None]
    try:
        groups = reshape_groups(x.shape, out_shape)
    except ValueError as err:
        ctx.freeze(x.all_slots(), 'shape', node, str(err))
        return opaque(node)
    return _reshaped(ctx, node, x, out_shape, groups)


def _reshaped(ctx: TraceContext, node, x: TensorChannels, out_shape: Sequence[int],
              groups) -> Outputs:
    """:func:`reshape`'s output: ``x`` viewed as ``out_shape``, its dims paired as
    ``groups`` (:func:`reshape_groups`) pairs them; dims in no group get no slots."""
    slots, split = {}, None
    if x.split is not None:
        split, merged = _reshaped_split(ctx, node, x.split, groups)
        if split is None and merged is None:
            x = heads.read_as_heads(ctx, node, x)
        elif merged is not None:
            slots.update(merged)
    for gi, go in groups:
        slotted = [d for d in gi if d in x.slots]
        if not slotted:
            continue
        if len(gi) == 1 and len(go) == 1:
            slots[go[0]] = x.slots[gi[0]]
            heads.view_as_one_head(ctx, node, x, out_shape, gi[0], go[0])
        elif len(go) == 1 and len(slotted) == 1:
            slots[go[0]] = _merged(x, gi, slotted[0])
        elif len(gi) == 1 and split is None:
            own = ctx.own_sizes.get(node, ())
            made, split = heads.split_channels(x.slots[gi[0]], go, [out_shape[d] for d in go],
                                               [own[d] for d in go]
                                               if len(own) == len(out_shape) else ())
            slots.update(made)
        else:
            for d in slotted:
                ctx.freeze(x.slots[d], 'mixing', node,
                           f'reshape {tuple(x.shape)} -> {tuple(out_shape)} splits or '
                           'merges channel dims in a way that cannot be sliced')
    return [TensorChannels(out_shape, slots, split, _reshaped_repeats(x, groups))]


def complex_view(ctx: TraceContext, node, ins: Sequence[InputInfo]) -> Outputs:
    """``view_as_complex`` / ``view_as_real``: a trailing dim of 2 (real, imaginary)
    dropped or added, the other dims as :func:`reshape` takes them (Llama 4 applies RoPE
    as a complex product: whole heads pass through).  A split that reaches the pairs
    (``head_dim`` under ``heads='width'``) freezes where ``view_as_complex`` reads it, as
    do channels on the pair dim itself: a pair is one complex number, and halving it is
    no slice.  The pair dim (the real side's last) is in no reshape group, so it gets no
    slots."""
    x = ins[0].channels
    (out_shape, ) = output_shapes(node)
    if x is None:
        return [None]
    if len(out_shape) < x.ndim:  # view_as_complex: x holds the pairs
        pairs = x.ndim - 1
        if pairs in x.pending or pairs in x.slots:
            ctx.freeze(x.all_slots(), 'shape', node, 'reads channels as (real, imaginary) pairs')
            return opaque(node)
        groups = reshape_groups(x.shape[:-1], out_shape)
    else:  # view_as_real: the output holds them
        groups = reshape_groups(x.shape, out_shape[:-1])
    return _reshaped(ctx, node, x, out_shape, groups)


def _reshaped_repeats(x: TensorChannels, groups) -> Dict[int, np.ndarray]:
    """Where a reshape takes the repeated dims (:class:`TensorChannels` ``repeats``): a
    group of dims merged into one output dim keeps its one repeated dim's head slots,
    tiled as the channels of :func:`_merged` are (``(B, heads)`` into ``B * heads``, or a
    kv head's ``(1, n_rep)`` into ``heads``); a group that also holds channels, or that a
    reshape splits, drops them."""
    repeats = {}
    for gi, go in groups:
        repeated = [d for d in gi if d in x.repeats]
        if len(go) == 1 and len(repeated) == 1 and not any(d in x.slots for d in gi):
            repeats[go[0]] = _merged(x, gi, repeated[0], x.repeats)
    return repeats


def _reshaped_split(ctx: TraceContext, node, split: Split, groups) -> Tuple:
    """Where a reshape takes a split: ``(moved split, None)`` when each of its dims
    maps to one dim, ``(None, {dim: merged slots})`` when they merge into one dim on
    their own, ``(None, None)`` otherwise (the caller reads it as heads)."""
    involved = [(gi, go) for gi, go in groups if set(gi) & set(split.dims)]
    if all(len(gi) == 1 and len(go) == 1 for gi, go in involved):
        return split.moved({gi[0]: go[0] for gi, go in involved}), None
    if len(involved) == 1:
        gi, go = involved[0]
        if len(go) == 1 and sorted(gi) == sorted(split.dims):
            return None, {go[0]: heads.merge(ctx, node, split, sorted(gi))}
    return None, None


def _merged(x: TensorChannels, dims: List[int], slotted: int,
            source: Optional[Dict[int, np.ndarray]] = None) -> np.ndarray:
    """The slots of ``dims`` merged into one dim, where only ``slotted`` has any (in
    ``x.slots``, or ``source``): each repeated over the dims after it, the whole tiled
    over the dims before it."""
    sizes = [x.shape[d] for d in dims]
    k = dims.index(slotted)
    after = int(np.prod(sizes[k + 1:], dtype=np.int64))
    before = int(np.prod(sizes[:k], dtype=np.int64))
    return np.tile(np.repeat((x.slots if source is None else source)[slotted], after), before)


def expand(ctx: TraceContext, node, ins: Sequence[InputInfo]) -> Outputs:
    """expand / broadcast_to: new leading dims; expanded dims had size 1 (no slots).

    A tensor with at most one channel dim (a single key/value head's ``head_dim``)
    expanded along a size-1 dim repeats that head there: the dim is marked in
    :class:`TensorChannels` ``repeats``, with the head's first slot, for attention to pair
    the query heads with (``heads.pair_single_head``: multi-query attention's
    ``repeat_kv``, or a matrix product broadcasting one head).
    """
    x = ins[0].channels
    (out_shape, ) = output_shapes(node)
    if x is None:
        return [None]
    offset = len(out_shape) - x.ndim
    split = x.split and x.split.moved({d: d + offset for d in x.split.dims})
    repeats = {d + offset: r for d, r in x.repeats.items()}
    expanded = [d + offset for d, size in enumerate(x.shape)
                if size == 1 and out_shape[d + offset] > 1 and d not in x.slots]
    if expanded and len(x.slots) <= 1 and split is None:
        head = heads.head_slot(ctx, node, x)
        repeats.update({d: np.full(out_shape[d], head) for d in expanded})
    return [TensorChannels(out_shape, {d + offset: s for d, s in x.slots.items()}, split,
                           repeats)]


def repeat(ctx: TraceContext, node, ins: Sequence[InputInfo]) -> Outputs:
    """``x.repeat(...)``: a repeated channel dim repeats its slots (tile)."""
    x = ins[0].channels
    (out_shape, ) = output_shapes(node)
    if x is None:
        return [None]
    repeats = list(node._saved_repeats)
    offset = len(repeats) - x.ndim
    return [TensorChannels(out_shape,
                           {d + offset: np.tile(s, repeats[d + offset])
                            for d, s in x.slots.items()})]


def flip(ctx: TraceContext, node, ins: Sequence[InputInfo]) -> Outputs:
    """``x.flip(dims)``: slots on a flipped dim are reversed."""
    x = ins[0].channels
    (out_shape, ) = output_shapes(node)
    if x is None:
        return [None]
    dims = {normalize_dim(d, x.ndim) for d in node._saved_dims}
    return [TensorChannels(out_shape, {d: (s[::-1].copy() if d in dims else s)
                                       for d, s in x.slots.items()})]


def roll(ctx: TraceContext, node, ins: Sequence[InputInfo]) -> Outputs:
    """``torch.roll(x, shifts, dims)``: on a channel dim of ``C`` channels, a roll by ``s``
    is the permutation ``out[c] = x[(c - s) % C]``, so the slots roll with the values (as a
    channel shuffle's slots follow its permutation).

    The slim model rolls its ``C'`` kept channels by the same ``s``, where the masked roll
    moves the kept ones by as many places as it wraps kept channels around the end: the
    two agree only where every channel the roll wraps around is kept (the last ``s`` for
    ``s > 0``, the first ``-s`` for ``s < 0``).  Those stay whole (reason kind
    :data:`~.slots.KEPT`), and the rest of the group prunes, channel ``c`` of the input
    with position ``(c + s) % C`` of the output (one slot).  Frozen instead, as
    :func:`.basic_rules.pass_through` freezes any op moving values along channels:

    - a shift not seen given as a number of the code's own (``x.shape[1] // 2``, read
      from the tensor, or a call ``SizeWatch`` did not see): the slim one may follow
      the slim width, the masked one does not;
    - a shift of at least ``C``: the slim roll wraps around another number of times;
    - a roll of the flattened tensor (no ``dims``): it moves values between channels and
      the other dims.

    Example: ``torch.roll(conv(x), 1, 1)`` keeps ``conv``'s last channel (it becomes the
    first) and prunes the others.
    """
    x = ins[0].channels
    (out_shape, ) = output_shapes(node)
    if x is None:
        return [None]
    if not node._saved_dims:
        return pass_through(ctx, node, ins)
    own = ctx.own_sizes.get(node)
    slots, rolled = dict(x.slots), set()
    for i, (dim, shift) in enumerate(zip(node._saved_dims, node._saved_shifts)):
        dim, shift = normalize_dim(dim, x.ndim), signed(shift)
        if not shift:
            continue
        rolled.add(dim)
        if dim not in slots:
            continue
        size = len(slots[dim])
        if own is None or not own[i]:
            ctx.freeze(slots.pop(dim), 'mixing', node,
                       f'rolls channel dim {dim} by {shift}, a shift not seen given as a '
                       'number of the code\'s own: one computed from a size it read '
                       'follows the slim width')
        elif abs(shift) >= size:
            ctx.freeze(slots.pop(dim), 'mixing', node,
                       f'rolls channel dim {dim} by {shift}, not less than its {size} '
                       'channels: the slim roll would wrap around another number of times')
        else:
            wrapped = slots[dim][size - shift:] if shift > 0 else slots[dim][:-shift]
            ctx.freeze(wrapped, KEPT, node,
                       f'rolls channel dim {dim} by {shift}: the {abs(shift)} channels it '
                       'wraps around stay, so that the slim roll wraps the same ones')
            slots[dim] = np.roll(slots[dim], shift)
    repeats = {d: r for d, r in x.repeats.items() if d not in rolled}
    return [TensorChannels(out_shape, slots, repeats=repeats)]


def concat(ctx: TraceContext, node, ins: Sequence[InputInfo]) -> Outputs:
    """``torch.cat``: along a channel dim the slots are concatenated (index offsets).

    Inputs without slots there (a model input, a frozen branch) contribute fixed
    channels.  On the other dims the inputs line up and are bound, as for ``add``:
    ``cat([cls_token.expand(B, -1, -1), x], dim=1)`` binds the token's embedding dim to
    ``x``'s.  The same tensor concatenated with itself simply repeats its slots.
    """
    (out_shape, ) = output_shapes(node)
    dim = normalize_dim(node._saved_dim, len(out_shape))
    sizes = [inp.shape[dim] if inp.shape is not None else None for inp in ins]
    missing = [i for i, s in enumerate(sizes) if s is None]
    if len(missing) > 1:
        ctx.freeze_all(ins, 'shape', node, 'several untracked inputs of unknown size')
        return opaque(node)
    if missing:
        sizes[missing[0]] = out_shape[dim] - sum(s for s in sizes if s is not None)
    slots = bind_aligned(ctx, node, ins, out_shape, skip=[dim])
    if any(inp.channels is not None and dim in inp.channels.slots for inp in ins):
        pieces = []
        for inp, size in zip(ins, sizes):
            if inp.channels is not None and dim in inp.channels.slots:
                pieces.append(inp.channels.slots[dim])
            else:
                pieces.append(ctx.external(size, node, 'fixed channels joined by cat'))
        slots[dim] = np.concatenate(pieces)
    return [TensorChannels(out_shape, slots)]


def stack(ctx: TraceContext, node, ins: Sequence[InputInfo]) -> Outputs:
    """``torch.stack``: a new dim; the inputs' channels are bound as for ``add``."""
    (out_shape, ) = output_shapes(node)
    dim = normalize_dim(node._saved_dim, len(out_shape))
    inner = out_shape[:dim] + out_shape[dim + 1:]
    slots = bind_aligned(ctx, node, ins, inner)
    return [TensorChannels(out_shape, {d + (d >= dim): s for d, s in slots.items()})]


def split(ctx: TraceContext, node, ins: Sequence[InputInfo]) -> Outputs:
    """split / chunk: each output takes its slice of the slots (index offsets).

    ``chunk`` (``SplitBackward0``) into equal parts binds the parts elementwise so every
    part keeps the same number of channels and ``chunk`` still splits evenly after
    pruning (ShuffleNetV2); a subnet must keep at least one channel of its input, so no
    piece vanishes.  Uneven chunks (``split(3)`` of 8 channels) freeze the channels.

    ``split(sizes)`` (``SplitWithSizesBackward0``) cuts at sizes the code gives, as a
    slice does (:func:`slice_`): each part keeps the slots it takes and must keep one,
    and the pruner checks the slim model on them (``ctx.sliced``).  The slim split takes
    the kept channels where the code computes its sizes from the slim widths
    (GPTBigCode's multi-query ``split((self.embed_dim, self.kv_dim, self.kv_dim))``,
    which a ``HEAD_ATTRIBUTES`` entry rewrites); a literal size freezes there.
    """
    x = ins[0].channels
    shapes = output_shapes(node)
    if x is None:
        return [None] * len(shapes)
    dim = normalize_dim(node._saved_dim, x.ndim)
    parts = [dict(x.slots) for _ in shapes]
    if dim in x.slots:
        sizes = [shape[dim] for shape in shapes]
        dim_slots = x.slots[dim]
        if node.name() == 'SplitBackward0' and len(set(sizes)) == 1 and len(sizes) > 1:
            blocks = dim_slots.reshape(len(sizes), sizes[0])
            ctx.bind(np.tile(blocks[0], len(sizes) - 1), blocks[1:].ravel(),
                     f'{node.name()} chunks channels into {len(sizes)} equal parts')
            after = ', '.join(ctx.neighbours(node)[0]) or 'the model input'
            ctx.slots.require(dim_slots, f'the input of a chunk into {len(sizes)} pieces '
                              f'({node.name()} after {after})')
            for part, block in zip(parts, blocks):
                part[dim] = block
        elif node.name() == 'SplitWithSizesBackward0':
            starts = np.cumsum([0] + sizes[:-1]).tolist()
            for part, start, size in zip(parts, starts, sizes):
                part[dim] = _checked_slice(ctx, node, dim_slots, start, size, 'a part')
        else:
            ctx.freeze(dim_slots, 'fixed', node,
                       f'splits channels into parts of fixed sizes {sizes}')
            for part in parts:
                del part[dim]
    return [TensorChannels(shape, part) for shape, part in zip(shapes, parts)]


def index(ctx: TraceContext, node, ins: Sequence[InputInfo]) -> Outputs:
    """``x[idx]``, index tensors on consecutive dims (a relative position bias table read
    through its index buffer, ``table[index]``): the channels of an indexed dim are
    gathered, so they freeze; every other dim keeps its slots, after the index's dims
    (the table's head dim stays bound to the heads it is added to).

    Index tensors on dims apart (their result dims go first) freeze everything, as any
    mixing op does.
    """
    x = ins[0].channels
    (out_shape, ) = output_shapes(node)
    if x is None:
        return [None]
    indexed = [d for d, t in enumerate(node._saved_indices) if t is not None]
    if not indexed or indexed != list(range(indexed[0], indexed[-1] + 1)) or x.split:
        return mixing(ctx, node, ins, 'indexes with tensors on dims apart')
    shift = len(out_shape) - x.ndim  # the index's dims replace the indexed ones
    slots = {}
    for d, s in x.slots.items():
        if d in indexed:
            ctx.freeze(s, 'mixing', node, f'gathers dim {d} by an index tensor')
        else:
            slots[d if d < indexed[0] else d + shift] = s
    return [TensorChannels(out_shape, slots)]


def _drop_dim(ctx: TraceContext, node, x: TensorChannels, dim: int, why: str):
    slots = {}
    for d, s in x.slots.items():
        if d == dim:
            ctx.freeze(s, 'fixed', node, why)
        else:
            slots[d - (d > dim)] = s
    return slots


def _picked(ctx: TraceContext, node, x: TensorChannels, dim: int, count: int,
            why: str) -> List[Tuple[Dict[int, np.ndarray], Optional[Split]]]:
    """Slots and split of each of ``count`` pieces that drop ``dim`` by fixed index."""
    slots = _drop_dim(ctx, node, x, dim, why)
    if x.split is not None and dim in x.split.dims:
        return [({**slots, **made}, split)
                for made, split in heads.select_axis(ctx, node, x.split, dim, count)]
    split = x.split and x.split.moved({d: d - (d > dim) for d in x.split.dims})
    return [(slots, split)] * count


def unbind(ctx: TraceContext, node, ins: Sequence[InputInfo]) -> Outputs:
    """``unbind(dim)``: each output loses ``dim``; channels on it would be picked by
    fixed index, so they freeze, unless they are a split's leading axis
    (``qkv.reshape(B, N, 3, heads, head_dim).permute(2, 0, 3, 1, 4).unbind(0)``): then
    the pieces keep the same channels (``tracing/heads.py``)."""
    x = ins[0].channels
    shapes = output_shapes(node)
    if x is None:
        return [None] * len(shapes)
    dim = normalize_dim(node._saved_dim, x.ndim)
    return [TensorChannels(shape, slots, split)
            for shape, (slots, split) in zip(shapes, _picked(ctx, node, x, dim, len(shapes),
                                                             'picks channels by a fixed index'))]


def select(ctx: TraceContext, node, ins: Sequence[InputInfo]) -> Outputs:
    """``x[:, i]``: drops a dim; selecting one channel by index freezes the channels,
    but picking one piece of a split's axis (``qkv[0]``) binds the pieces as unbind."""
    x = ins[0].channels
    (out_shape, ) = output_shapes(node)
    if x is None:
        return [None]
    dim = normalize_dim(node._saved_dim, x.ndim)
    index = normalize_dim(node._saved_index, x.shape[dim])
    slots, split = _picked(ctx, node, x, dim, x.shape[dim],
                           'selects a channel by a fixed index')[index]
    return [TensorChannels(out_shape, slots, split)]


def slice_(ctx: TraceContext, node, ins: Sequence[InputInfo]) -> Outputs:
    """``x[:, a:b]``: slices of other dims keep the slots; a slice of a channel dim
    keeps the slots it takes, and they are checked on the model (``ctx.sliced``).

    The bounds are the code's: the slim model's slice takes the same channels only where
    the code computes its bounds from the slim widths (Phi-3's fused ``qkv_proj``, cut
    at ``config.num_attention_heads * head_dim``, which a ``HEAD_ATTRIBUTES`` entry
    rewrites).  So the pruner compares slim and masked outputs with those channels cut
    and freezes them where the two differ (a literal ``x[:, :16]``); on a model with
    ``meta`` parameters, which is not run, they freeze.  A strided slice freezes.

    Under ``heads='width'`` a slice of ``head_dim`` positions into equal blocks (RoPE's
    ``x[..., :d // 2]`` and ``x[..., d // 2:]``) keeps its block's slots, and the blocks
    are bound elementwise as ``chunk`` binds its pieces (:func:`_head_width_block`).
    """
    x = ins[0].channels
    (out_shape, ) = output_shapes(node)
    if x is None:
        return [None]
    dim = normalize_dim(node._saved_dim, x.ndim)
    slots = dict(x.slots)
    if dim in slots and out_shape[dim] != x.shape[dim]:
        block = _head_width_block(ctx, node, slots[dim], out_shape[dim])
        if block is None and node._saved_step == 1:
            start = min(normalize_dim(node._saved_start, x.shape[dim]), x.shape[dim])
            block = _checked_slice(ctx, node, slots[dim], start, out_shape[dim], 'a slice')
        if block is not None:
            slots[dim] = block
        else:
            ctx.freeze(slots.pop(dim), 'fixed', node,
                       f'slices channel dim {dim} with a stride of {node._saved_step}')
    return [TensorChannels(out_shape, slots)]


def _checked_slice(ctx: TraceContext, node, slots: np.ndarray, start: int, size: int,
                   what: str) -> np.ndarray:
    """``slots[start:start + size]``, cut at a bound the code computes: ``slots`` join
    ``ctx.sliced``, for the pruner to check that the slim model cuts at the kept
    channels, and a subnet must keep one channel of the block (``what`` names it)."""
    block = slots[start:start + size]
    ctx.sliced.update(slots.tolist())
    after = ', '.join(ctx.neighbours(node)[0]) or 'the model input'
    ctx.slots.require(block, f'{what} of channels {start}:{start + len(block)} '
                      f'({node.name()} after {after})')
    return block


def _head_width_block(ctx: TraceContext, node, slots: np.ndarray,
                      size: int) -> Optional[np.ndarray]:
    """The slots of ``x[..., start:start + size]`` of ``head_dim`` positions ``slots``,
    if it is one of equal blocks (step 1, ``size`` divides the width, ``start`` a multiple
    of ``size``); None otherwise.

    The blocks are bound elementwise, so every block keeps the same positions: code that
    slices by the width it reads (``x.shape[-1] // 2``) takes the same blocks of the slim
    tensor, and RoPE's ``rotate_half`` pairs position ``i`` with ``i + d/2`` in both.
    """
    width = len(slots)
    start = min(normalize_dim(node._saved_start, width), width)
    if ctx.heads != 'width' or not size or node._saved_step != 1 or width % size \
            or start % size or not ctx.is_head_width(slots):
        return None
    blocks = slots.reshape(width // size, size)
    ctx.bind(np.tile(blocks[0], len(blocks) - 1), blocks[1:].ravel(),
             f'{node.name()} slices head_dim into {len(blocks)} equal blocks')
    return blocks[start // size]
