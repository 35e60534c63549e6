"""Where a masked model's tensors hold the channels a mask cuts, followed op by op.

A masked layer's output holds its pruned channels as zeros; the slim model has no such
entries.  A layer or product that reads them on a dim its own masks do not cover (a norm
over each attention head, a product over pruned heads) computes over entries the slim
model does not have, so the FLOPs counter (:mod:`razorlib.utils.complexity`) follows
each cut from the layer's output through views, permutes, channel shuffles, rolls,
broadcasts, indexing, splits and joins (:data:`Rows`, one keep-mask per dim) to scale
those counts to the kept share.
"""
import functools
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np
import torch

from ..tracing.shape_rules import reshape_groups

__all__ = ['BROADCASTS', 'JOINS', 'OTHER_MOVES', 'PERMUTES', 'RESHAPES', 'ROLLS', 'SHUFFLES',
           'SPLITS', 'UNBINDS', 'Rows', 'first_operand', 'indexed_rows', 'joined_rows',
           'permuted_rows', 'reshaped_rows', 'rolled_rows', 'shuffled_rows', 'split_rows']


#: ``{dim: keep}`` of a tensor: along ``dim``, the entries of a masked layer's channels,
#: ``keep[i]`` False where the layer's out mask cuts channel ``i`` (the slim tensor has
#: only the kept ones there).  See :meth:`_FunctionCounter.kept_share`.
Rows = Dict[int, np.ndarray]

#: Calls that view their operand's entries in another shape, and that move its dims (the
#: first followed, the rest not: their output may have their operand's shape, its dims
#: moved all the same).
RESHAPES = frozenset((torch.Tensor.view, torch.Tensor.reshape, torch.reshape, torch.flatten,
                      torch.Tensor.flatten, torch.Tensor.unflatten, torch.unflatten,
                      torch.Tensor.view_as, torch.Tensor.reshape_as, torch.squeeze,
                      torch.Tensor.squeeze, torch.unsqueeze, torch.Tensor.unsqueeze))
PERMUTES = frozenset((torch.permute, torch.Tensor.permute, torch.transpose,
                      torch.Tensor.transpose))
#: Calls that reorder their operand's channels (dim 1) in place of the shape: the shape
#: alone would carry the keeps of the old order to the new one.
SHUFFLES = frozenset((torch.channel_shuffle, torch.native_channel_shuffle))
#: Calls that roll their operand's entries around the end of some dims (or of the
#: flattened tensor), in place of the shape.
ROLLS = frozenset((torch.roll, torch.Tensor.roll))
#: Calls that broadcast their operand to more (leading) dims or along its size-1 dims.
BROADCASTS = frozenset((torch.Tensor.expand, torch.Tensor.expand_as, torch.broadcast_to,
                        torch.Tensor.broadcast_to))
#: Splits and joins whose name sets their dim, NumPy's: ``hsplit`` / ``hstack`` /
#: ``column_stack`` the columns (dim 1; dim 0 of a 1-D tensor), ``vsplit`` / ``vstack``
#: the rows (dim 0), ``dsplit`` / ``dstack`` the depth (dim 2).  Each takes
#: ``min(dim, ndim - 1)`` of a tensor of ``ndim`` dims (a split's operand, a join's
#: output; ``column_stack``'s has 2 at least).
_NAMED_DIMS = {**dict.fromkeys((torch.hsplit, torch.Tensor.hsplit, torch.hstack,
                                torch.column_stack), 1),
               **dict.fromkeys((torch.vsplit, torch.Tensor.vsplit, torch.vstack,
                                torch.row_stack), 0),
               **dict.fromkeys((torch.dsplit, torch.Tensor.dsplit, torch.dstack), 2)}
#: Calls that cut their operand into a tuple of consecutive pieces along ``dim``: their
#: second argument for those whose pieces drop it (unbinds), else their third, or the one
#: their name says (:data:`_NAMED_DIMS`).
UNBINDS = frozenset((torch.unbind, torch.Tensor.unbind))
SPLITS = UNBINDS | frozenset((torch.chunk, torch.Tensor.chunk, torch.split, torch.Tensor.split,
                              torch.split_with_sizes, torch.Tensor.split_with_sizes,
                              torch.tensor_split, torch.Tensor.tensor_split, torch.hsplit,
                              torch.Tensor.hsplit, torch.vsplit, torch.Tensor.vsplit,
                              torch.dsplit, torch.Tensor.dsplit))
#: Calls that join a sequence of tensors along ``dim`` (their second argument, or the one
#: their name says): end to end (cats), or each as one index of a new dim (stacks).
_STACKS = frozenset((torch.stack, ))
JOINS = _STACKS | frozenset((torch.cat, torch.concat, torch.concatenate, torch.hstack,
                             torch.vstack, torch.row_stack, torch.dstack, torch.column_stack))
OTHER_MOVES = frozenset((torch.t, torch.Tensor.t, torch.movedim, torch.Tensor.movedim,
                         torch.swapaxes, torch.Tensor.swapaxes, torch.swapdims,
                         torch.Tensor.swapdims, torch.Tensor.T.__get__,
                         torch.Tensor.mT.__get__, torch.Tensor.H.__get__,
                         torch.Tensor.mH.__get__))


def reshaped_rows(rows: Rows, shape: Sequence[int], out_shape: Sequence[int]) -> Rows:
    """``rows`` of a tensor of ``shape`` viewed as ``out_shape``: a dim merged with others
    keeps its channels' entries repeated and tiled, one split over several dims gives each
    the entries it holds of them; where the kept entries of a merged or split dim form no
    grid of kept entries per dim (which no slim tensor could hold), they are dropped.

    Example:
        >>> heads = reshaped_rows({2: np.repeat([True, False], 3)}, (2, 5, 6), (2, 5, 2, 3))
        >>> {dim: keep.tolist() for dim, keep in heads.items()}
        {2: [True, False]}
    """
    try:
        groups = reshape_groups(shape, out_shape)
    except ValueError:
        return {}
    out: Rows = {}
    for dims, out_dims in groups:
        if not any(d in rows for d in dims):
            continue
        grid = functools.reduce(np.multiply.outer, [rows.get(d, np.ones(shape[d], dtype=bool))
                                                    for d in dims])
        grid = grid.reshape([out_shape[d] for d in out_dims])
        kept = [grid.any(axis=tuple(a for a in range(grid.ndim) if a != axis))
                for axis in range(grid.ndim)]
        if np.array_equal(functools.reduce(np.multiply.outer, kept), grid):
            out.update({d: keep for d, keep in zip(out_dims, kept) if not keep.all()})
    return out


def indexed_rows(index: Any, rows: Rows, ndim: int) -> Rows:
    """``rows`` of a tensor of ``ndim`` dims after ``x[index]`` of ints, slices, ``None``
    and ``...`` (transformers' ``repeat_kv`` indexes ``x[:, :, None]``, RoPE slices
    ``x[..., :d // 2]``): a slice keeps its entries' keeps, an int drops its dim, ``None``
    adds one; none for an index by tensors.

    Example:
        >>> rows = indexed_rows((..., None, slice(0, 2)), {1: np.array([True, False, True])}, 2)
        >>> {dim: keep.tolist() for dim, keep in rows.items()}
        {2: [True, False]}
    """
    index = index if isinstance(index, tuple) else (index, )
    if not all(i is None or i is Ellipsis or isinstance(i, slice) or
               (isinstance(i, int) and not isinstance(i, bool)) for i in index) or \
            sum(i is Ellipsis for i in index) > 1:
        return {}
    given = sum(i is not None and i is not Ellipsis for i in index)
    at = next((n for n, i in enumerate(index) if i is Ellipsis), len(index))
    index = index[:at] + (slice(None), ) * (ndim - given) + index[at + 1:]
    out: Rows = {}
    dim = out_dim = 0
    for i in index:
        if isinstance(i, slice) and dim in rows and not rows[dim][i].all():
            out[out_dim] = rows[dim][i]
        out_dim += not isinstance(i, int)
        dim += i is not None
    return out


def permuted_rows(func, args: tuple, kwargs: Dict[str, Any], rows: Rows, ndim: int) -> Rows:
    """``rows`` of ``args[0]`` after a permute or transpose."""
    if func in (torch.permute, torch.Tensor.permute):
        order = args[1] if len(args) == 2 and isinstance(args[1], (tuple, list)) else \
            args[1:] or kwargs.get('dims', ())
        order = [d % ndim for d in order]
    else:
        order = list(range(ndim))
        first = (args[1] if len(args) > 1 else kwargs['dim0']) % ndim
        second = (args[2] if len(args) > 2 else kwargs['dim1']) % ndim
        order[first], order[second] = order[second], order[first]
    return {order.index(d): keep for d, keep in rows.items()}


def shuffled_rows(args: tuple, kwargs: Dict[str, Any], rows: Rows) -> Rows:
    """``rows`` of ``args[0]`` after ``channel_shuffle(x, groups)`` (``nn.ChannelShuffle``):
    dim 1's keep moved as the channels are, channel ``i`` of group ``k`` to ``i * groups +
    k``, as the ``view`` / ``transpose`` / ``reshape`` idiom moves it through
    :func:`reshaped_rows` and :func:`permuted_rows`.

    Example:
        >>> rows = shuffled_rows((None, 2), {}, {1: np.array([True, True, False, False])})
        >>> rows[1].tolist()
        [True, False, True, False]
    """
    groups = args[1] if len(args) > 1 else kwargs['groups']
    if 1 not in rows:
        return rows
    return {**rows, 1: rows[1].reshape(groups, -1).T.flatten()}


def rolled_rows(args: tuple, kwargs: Dict[str, Any], rows: Rows, ndim: int) -> Rows:
    """``rows`` of the operand (:func:`first_operand`) after ``torch.roll(x, shifts, dims)``:
    the keep of each dim rolled moves with its entries, ``out[i] = x[(i - s) % n]``, as the
    tracer rolls a channel dim's slots (:func:`razorlib.tracing.shape_rules.roll`), so a
    view into heads after the roll finds the heads the slim model keeps.  None for a roll
    of the flattened tensor (no ``dims``), which moves entries from dim to dim.

    Example:
        >>> rows = rolled_rows((None, 1, 1), {}, {1: np.array([True, True, False])}, 2)
        >>> rows[1].tolist()
        [False, True, True]
    """
    shifts = _ints(args[1] if len(args) > 1 else kwargs['shifts'])
    dims = _ints(args[2] if len(args) > 2 else kwargs.get('dims'))
    if not dims:
        return {}
    out = dict(rows)
    for shift, dim in zip(shifts, (d % ndim for d in dims)):
        if dim in out:
            out[dim] = np.roll(out[dim], shift)
    return out


def _ints(value: Any) -> Tuple[int, ...]:
    """A call's argument given as an int or a sequence of ints, as a tuple; () for None."""
    if value is None:
        return ()
    return tuple(map(int, value)) if isinstance(value, (tuple, list)) else (int(value), )


def first_operand(args: tuple, kwargs: Dict[str, Any]) -> Any:
    """What a call (a view, a roll, a split, a join) works on: its first argument, or the
    keyword that names it when the call names every argument
    (``torch.reshape(input=x, shape=s)``, ``torch.chunk(input=x, chunks=2, dim=1)``,
    ``torch.cat(tensors=[a, b], dim=1)``, which reach the counter with no positional
    argument at all); None where there is neither."""
    return args[0] if args else kwargs.get('input', kwargs.get('tensors'))


def _call_dim(func, args: tuple, kwargs: Dict[str, Any], at: int, ndim: int) -> int:
    """The dim a split or join of a tensor of ``ndim`` dims works along: the one its name
    says (:data:`_NAMED_DIMS`), else its argument ``at`` or its keyword ``dim`` (``axis``
    for NumPy's spelling, ``torch.concatenate(..., axis=1)``), 0 by default."""
    if func in _NAMED_DIMS:
        return min(_NAMED_DIMS[func], ndim - 1)
    dim = args[at] if len(args) > at else kwargs.get('dim', kwargs.get('axis', 0))
    return dim % ndim


def split_rows(func, args: tuple, kwargs: Dict[str, Any], rows: Rows,
               pieces: Sequence[torch.Tensor]) -> List[Rows]:
    """``rows`` of the operand (:func:`first_operand`) in each of the ``pieces`` a split,
    chunk or unbind cuts it into (ShuffleNet V2's ``x.chunk(2, dim=1)``, timm's
    ``qkv.unbind(0)``, ``x.hsplit(2)``): a piece takes its slice of the keep of the dim cut
    and the other dims' keeps; an unbind's pieces lose the dim.  Pieces that are no
    consecutive slices of the dim (``tensor_split`` at indices out of order, whose sizes
    add up to more than the dim's) get none.

    Example:
        >>> keep = {1: np.array([True, False, True, True])}
        >>> x = torch.zeros(2, 4)
        >>> [{d: k.tolist() for d, k in r.items()}
        ...  for r in split_rows(torch.split, (x, [2, 2], -1), {}, keep, x.split([2, 2], -1))]
        [{1: [True, False]}, {}]
        >>> [r[0].tolist() for r in split_rows(torch.unbind, (x, ), {}, keep, x.unbind())]
        [[True, False, True, True], [True, False, True, True]]
    """
    x, unbind = first_operand(args, kwargs), func in UNBINDS
    dim = _call_dim(func, args, kwargs, 1 if unbind else 2, x.dim())
    sizes = [1 if unbind else piece.shape[dim] for piece in pieces]
    if sum(sizes) != x.shape[dim]:
        return [{} for _ in pieces]
    out = []
    for stop, size in zip(np.cumsum(sizes), sizes):
        piece = {d - (unbind and d > dim): keep for d, keep in rows.items() if d != dim}
        keep = rows.get(dim)
        if keep is not None and not unbind and not keep[stop - size:stop].all():
            piece[dim] = keep[stop - size:stop]
        out.append(piece)
    return out


def joined_rows(func, args: tuple, kwargs: Dict[str, Any], rows: Sequence[Rows],
                out: torch.Tensor) -> Rows:
    """``rows`` of each tensor (:func:`first_operand`) a cat or stack joins into ``out``, as
    a slim model joins its pieces' kept entries: along a cat's dim the pieces' keeps end
    to end, each piece without one keeping all of its width (DenseNet's and ShuffleNet
    V2's ``torch.cat([x1, x2], 1)``); a stack's new dim cuts nothing.  Another dim takes
    the keep of the first piece that has one: the slim pieces of a join have one width
    there, so one piece's cut is the others' (a class token expanded beside masked
    patches, whose bare parameter's keep is not followed).  ``column_stack``'s 1-D pieces
    join as the columns it makes of them, their rows on dim 0.  Pieces that ``vstack`` /
    ``dstack`` give more dims first (and ``cat``'s legacy empty 1-D tensors) get none.

    Example:
        >>> a, b = torch.zeros(2, 4), torch.zeros(2, 2)
        >>> rows = joined_rows(torch.cat, ([a, b], 1), {}, [{1: np.array([1, 0, 1, 0], bool)},
        ...                                                  {}], torch.cat([a, b], 1))
        >>> rows[1].tolist()
        [True, False, True, False, True, True]
    """
    stack = func in _STACKS
    shapes = [(t.numel(), 1) if func is torch.column_stack and t.dim() < 2 else t.shape
              for t in first_operand(args, kwargs)]
    dim = _call_dim(func, args, kwargs, 1, out.dim())
    if any(len(shape) != out.dim() - stack for shape in shapes):
        return {}
    found: Rows = {}
    for piece in rows:
        for d, keep in piece.items():
            if stack or d != dim:
                found.setdefault(d + (stack and d >= dim), keep)
    if not stack and any(dim in piece for piece in rows):
        found[dim] = np.concatenate([piece.get(dim, np.ones(shape[dim], dtype=bool))
                                     for shape, piece in zip(shapes, rows)])
    return found
