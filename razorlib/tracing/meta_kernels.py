"""Shape-only kernels for the ops a ``meta`` forward spends its time in (:class:`FastMetaOps`).

torch's meta kernels for convolutions, norms, ``cat``, reductions, matrix products,
softmax and broadcasting elementwise ops are Python decompositions costing 20 us to
1 ms each, most of a meta forward; tracing needs only the output's shape, strides and
dtype.  Each kernel here computes them for the common case and returns None for
anything it does not fully check (mismatched sizes, type promotion, unusual layouts):
torch's own kernel then runs and raises its usual error, which is what the pruned run
in ``pruning/verify.py`` relies on.  ``tests/test_tracing/test_fast_meta_ops.py``
compares every kernel's shapes, strides, dtypes and errors with torch's.  One kernel
also runs what torch's meta kernel refuses: ``grouped_mm`` of float32 operands (its
meta kernel asks for bfloat16, its CPU kernel takes them), so that fused experts in
float32 trace on meta as they run on CPU.
"""
import itertools
from functools import partial
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ['FastMetaOps']

aten = torch.ops.aten


def _like(x: torch.Tensor) -> torch.Tensor:
    """A fresh meta tensor with ``x``'s shape, strides and dtype.

    Inside a dispatch mode ``empty_like``/``new_empty`` run torch's Python reference
    kernels (~20 us); ``empty_strided`` on ``meta`` costs ~2 us.
    """
    return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device='meta')


def _new(x: torch.Tensor, size) -> torch.Tensor:
    """A fresh contiguous meta tensor of ``size`` with ``x``'s dtype."""
    return torch.empty(size, dtype=x.dtype, device='meta')


def _plain(x: torch.Tensor) -> bool:
    """A contiguous meta tensor that no other memory format claims too.

    A 4-D/5-D tensor with size-1 dims can be contiguous and channels-last at once, and
    torch's layout rules then pick per op: such tensors take torch's own kernel.
    """
    if not x.is_meta or not x.is_contiguous():
        return False
    if x.dim() == 4:
        return not x.is_contiguous(memory_format=torch.channels_last)
    if x.dim() == 5:
        return not x.is_contiguous(memory_format=torch.channels_last_3d)
    return True


def _per_channel(n: int, *tensors) -> bool:
    """Whether each of ``tensors`` is absent or holds exactly ``n`` values in one dim."""
    return all(t is None or tuple(t.shape) == (n, ) for t in tensors)


def _batch_norm(x, weight, bias, running_mean, running_var, *args):
    channels = x.shape[1] if x.dim() > 1 else 0
    if not x.is_meta or not channels or not _per_channel(channels, weight, bias,
                                                         running_mean, running_var):
        return None
    return _like(x), _new(x, channels), _new(x, channels)


def _layer_norm(x, normalized_shape, weight, bias, eps):
    """torch normalises a contiguous copy of ``x``: the output is contiguous."""
    count = len(normalized_shape)
    if not x.is_meta or tuple(x.shape[x.dim() - count:]) != tuple(normalized_shape) or any(
            t is not None and tuple(t.shape) != tuple(normalized_shape) for t in (weight, bias)):
        return None
    stats = x.shape[:x.dim() - count] + (1, ) * count
    return _new(x, x.shape), _new(x, stats), _new(x, stats)


def _group_norm(x, weight, bias, n, c, hxw, group, eps):
    if not _plain(x) or x.dim() < 2 or x.shape[1] != c or c % group or \
            not _per_channel(c, weight, bias):
        return None
    return _like(x), _new(x, (n, group)), _new(x, (n, group))


def _convolution(x, weight, bias, stride, padding, dilation, transposed, output_padding,
                 groups):
    """Output of ``aten.convolution`` from the textbook size formula."""
    spatial = x.dim() - 2
    if not x.is_meta or spatial < 1 or weight.dim() != x.dim() or not x.is_contiguous() \
            or len(stride) != spatial or len(padding) != spatial:
        return None
    in_channels = weight.shape[0] if transposed else weight.shape[1] * groups
    out_channels = weight.shape[1] * groups if transposed else weight.shape[0]
    if x.shape[1] != in_channels or out_channels % groups or not _per_channel(out_channels,
                                                                              bias):
        return None
    size = [x.shape[0], out_channels]
    kernel = weight.shape[2:]
    for i in range(spatial):
        span = dilation[i] * (kernel[i] - 1)
        if transposed:
            size.append((x.shape[i + 2] - 1) * stride[i] - 2 * padding[i] + span
                        + output_padding[i] + 1)
        else:
            size.append((x.shape[i + 2] + 2 * padding[i] - span - 1) // stride[i] + 1)
    return _new(x, size) if min(size) > 0 else None


def _broadcast(shapes: Sequence[Sequence[int]]) -> Optional[Tuple[int, ...]]:
    """The broadcast of ``shapes``, or None if they do not broadcast."""
    out = [1] * max(len(s) for s in shapes)
    for shape in shapes:
        offset = len(out) - len(shape)
        for i, n in enumerate(shape):
            have = out[offset + i]
            if n != have and n != 1:
                if have != 1:
                    return None
                out[offset + i] = n
    return tuple(out)


def _iterator_strides(shape: Tuple[int, ...], operands: Sequence[torch.Tensor]
                      ) -> Optional[Tuple[int, ...]]:
    """The strides torch's TensorIterator gives an elementwise op's output (its
    ``reorder_dimensions``: the operands' own order of dims, broadcast dims aside), or
    None when that order is the contiguous one."""
    ndim = len(shape)
    rows = []
    for t in operands:
        offset = ndim - t.dim()
        rows.append([0] * offset + [0 if n == 1 and shape[offset + i] != 1 else s
                                    for i, (n, s) in enumerate(zip(t.shape, t.stride()))])

    def should_swap(d0: int, d1: int) -> int:
        for row in rows:
            s0, s1 = row[d0], row[d1]
            if s0 == 0 or s1 == 0:
                continue
            if s0 != s1:
                return -1 if s0 < s1 else 1
            if shape[d0] > shape[d1]:
                return 1
        return 0

    natural = list(range(ndim - 1, -1, -1))
    perm = list(natural)
    for i in range(1, ndim):
        d1 = i
        for d0 in range(i - 1, -1, -1):
            order = should_swap(perm[d0], perm[d1])
            if order > 0:
                perm[d0], perm[d1] = perm[d1], perm[d0]
                d1 = d0
            elif order < 0:
                break
    if perm == natural:
        return None
    strides, step = [0] * ndim, 1
    for d in perm:
        strides[d] = step
        step *= shape[d]
    return tuple(strides)


def _elementwise(in_place: bool, x, *args, **kwargs):
    """An elementwise op on meta tensors of ``x``'s dtype (no type promotion), laid out
    as torch's TensorIterator lays it out."""
    if not isinstance(x, torch.Tensor) or not x.is_meta or not x.is_floating_point():
        return None
    others = []
    for arg in itertools.chain(args, kwargs.values()):
        if isinstance(arg, torch.Tensor):
            if arg.dtype != x.dtype or not arg.is_meta:
                return None
            others.append(arg)
        elif isinstance(arg, complex):
            return None
    if x.is_contiguous() and all(t.shape == x.shape and t.is_contiguous() for t in others):
        return x if in_place else _like(x)
    shape = _broadcast([x.shape] + [t.shape for t in others])
    if shape is None or in_place and shape != tuple(x.shape):
        return None
    if in_place:
        return x
    strides = _iterator_strides(shape, [x] + others)
    if strides is None:
        return _new(x, shape)
    return torch.empty_strided(shape, strides, dtype=x.dtype, device='meta')


def _cat(tensors, dim=0):
    """``torch.cat`` of contiguous tensors: one contiguous output."""
    if not tensors or not all(isinstance(t, torch.Tensor) and _plain(t) for t in tensors):
        return None
    first = tensors[0]
    ndim = first.dim()
    dim = dim + ndim if dim < 0 else dim
    if not ndim or not 0 <= dim < ndim:
        return None
    shape = list(first.shape)
    shape[dim] = 0
    for t in tensors:
        if t.dim() != ndim or t.dtype != first.dtype or any(
                t.shape[i] != shape[i] for i in range(ndim) if i != dim):
            return None
        shape[dim] += t.shape[dim]
    return _new(first, shape)


def _reduce(x, dim=None, keepdim=False, *, dtype=None):
    """``mean``/``sum`` over ``dim`` of a contiguous float tensor."""
    if dtype is not None or not _plain(x) or not x.is_floating_point() or not x.dim():
        return None
    ndim = x.dim()
    dims = range(ndim) if not dim else [d + ndim if d < 0 else d for d in dim]
    if len(set(dims)) != len(dims) or not all(0 <= d < ndim for d in dims):
        return None
    shape = [1 if i in dims else n for i, n in enumerate(x.shape) if keepdim or i not in dims]
    return _new(x, shape)


def _clone(x, memory_format=None):
    if not _plain(x):
        return None
    if memory_format in (None, torch.preserve_format, torch.contiguous_format):
        return _like(x)
    return None


def _same_dtype(*tensors) -> bool:
    """Float meta tensors of one dtype."""
    return all(t.dtype == tensors[0].dtype and t.is_floating_point() and t.is_meta
               for t in tensors)


def _mm(a, b, *, batched: bool = False):
    """``mm``/``bmm``: a contiguous ``(..., n, m)`` output."""
    rank = 3 if batched else 2
    if a.dim() != rank or b.dim() != rank or not _same_dtype(a, b) \
            or a.shape[-1] != b.shape[-2] or batched and a.shape[0] != b.shape[0]:
        return None
    return _new(a, a.shape[:-1] + b.shape[-1:])


def _addmm(bias, a, b, *, beta=1, alpha=1):
    out = _mm(a, b)
    if out is None or not isinstance(bias, torch.Tensor) or not _same_dtype(bias, a) \
            or _broadcast([bias.shape, out.shape]) != tuple(out.shape):
        return None
    return out


#: The dtypes ``grouped_mm``'s CPU kernel multiplies.
_GROUPED_MM_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _grouped_mm_layout(x: torch.Tensor) -> bool:
    """Whether the last two dims of ``x`` are laid out as ``grouped_mm``'s kernels take
    them: one of unit stride, the other spanning a multiple of 16 bytes, whatever its
    size."""
    rows, cols = x.stride()[-2:]
    other = rows if cols == 1 else cols if rows == 1 else None
    return other is not None and other * x.element_size() % 16 == 0


def _grouped_mm(a, b, offs=None, bias=None, out_dtype=None):
    """``grouped_mm`` of tokens ``(S, K)`` sorted by group and one ``(K, N)`` matrix per
    group ``(G, K, N)``, ``offs`` (int32) each group's end: a contiguous ``(S, N)``, as
    torch's meta kernel gives it.  That kernel takes bfloat16 operands only, where the
    CPU kernel takes float32 and float16 too (fused experts in float32 run on CPU and
    could not be traced on meta).  Rows that are not 16-byte aligned raise the CPU
    kernel's error; anything else unusual falls through to torch's meta kernel, to fail.
    """
    if a.dim() != 2 or b.dim() != 3 or offs is None or bias is not None \
            or not _same_dtype(a, b) or a.dtype not in _GROUPED_MM_DTYPES \
            or not offs.is_meta or offs.dtype != torch.int32 \
            or a.shape[1] != b.shape[1] or tuple(offs.shape) != (b.shape[0], ) \
            or out_dtype not in (None, a.dtype) or b.stride(0) * b.element_size() % 16:
        return None
    if not (_grouped_mm_layout(a) and _grouped_mm_layout(b)):
        raise RuntimeError('grouped_mm: strides should be multiple of 16 bytes (each '
                           "operand's rows or columns), as its CPU kernel requires")
    return _new(a, (a.shape[0], b.shape[2]))


def _softmax(x, dim, *rest):
    """``_softmax(x, dim, half_to_float)`` / ``_safe_softmax(x, dim, dtype)``."""
    if not _plain(x) or not x.is_floating_point() or any(rest) or not -x.dim() <= dim < x.dim():
        return None
    return _like(x)


#: Elementwise ops whose output has their first input's dtype when no operand promotes it.
_SAME_AS_INPUT = ('add', 'sub', 'mul', 'div', 'relu', 'gelu', 'silu', 'sigmoid', 'tanh',
                  'hardtanh', 'hardswish', 'hardsigmoid', 'leaky_relu', 'elu', 'clamp',
                  'clamp_min', 'neg', 'mish', 'softplus')
_IN_PLACE = ('add', 'sub', 'mul', 'div', 'relu', 'silu', 'sigmoid', 'hardtanh', 'hardswish',
             'hardsigmoid', 'leaky_relu', 'elu', 'clamp', 'clamp_min')


def _kernel_table() -> Dict[int, Callable[..., Any]]:
    """``id`` of each ``OpOverload`` -> its shape kernel (an ``id`` hashes faster than the
    overload itself, and overloads live as long as torch)."""
    table = {
        aten.native_batch_norm.default: _batch_norm,
        aten.native_layer_norm.default: _layer_norm,
        aten.native_group_norm.default: _group_norm,
        aten.convolution.default: _convolution,
        aten.cat.default: _cat,
        aten.mean.dim: _reduce,
        aten.sum.dim_IntList: _reduce,
        aten.clone.default: _clone,
        aten.mm.default: _mm,
        aten.bmm.default: partial(_mm, batched=True),
        aten.addmm.default: _addmm,
        aten._grouped_mm.default: _grouped_mm,
        aten._softmax.default: _softmax,
        aten._safe_softmax.default: _softmax,
    }
    for names, in_place in ((_SAME_AS_INPUT, False), (_IN_PLACE, True)):
        for name in names:
            packet = getattr(aten, name + ('_' if in_place else ''))
            for overload in packet.overloads():
                if overload != 'out' and not overload.endswith('_out'):
                    table[getattr(packet, overload)] = partial(_elementwise, in_place)
    return {id(op): kernel for op, kernel in table.items()}


class FastMetaOps(TorchDispatchMode):
    """Shape-only kernels for the ops a meta forward spends its time in.

    Unusual cases (type promotion, strided layouts, mismatched sizes) fall back to
    torch's own kernels.  The mode sits below autograd, so the grad_fn nodes
    (``NativeBatchNormBackward0``...) are recorded as usual.

    Example:
        >>> x = torch.empty(1, 3, 32, 32, device='meta', requires_grad=True)
        >>> w = torch.empty(8, 3, 3, 3, device='meta', requires_grad=True)
        >>> with FastMetaOps():
        ...     y = torch.relu(torch.conv2d(x, w, stride=2))
        >>> tuple(y.shape), y.grad_fn.name()
        ((1, 8, 15, 15), 'ReluBackward0')
    """

    _KERNELS = _kernel_table()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        kernel = self._KERNELS.get(id(func))
        if kernel is not None and args:
            try:
                out = kernel(*args, **kwargs)
            except TypeError:  # an argument the kernel does not take: torch's own runs
                out = None
            if out is not None:
                return out
        return func(*args, **kwargs)
