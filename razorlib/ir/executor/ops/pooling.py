"""Pooling: MaxPool (with its Indices output), AveragePool, GlobalAveragePool, GlobalMaxPool."""
from typing import Callable, Dict, List

import torch
import torch.nn.functional as F

from ...operation import Operation
from ..kernels import UnsupportedOperationError, register_function, register_kernel
from .common import SlidingWindow, torch_pads

__all__: List[str] = []

_MAX_POOL: Dict[int, Callable] = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
_AVG_POOL: Dict[int, Callable] = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}


def _fits_torch(begins: List[int], ends: List[int], kernel: List[int],
                dilations: List[int]) -> bool:
    """Whether torch's own symmetric padding (at most half the window) does."""
    return begins == ends and all(2 * pad <= (k - 1) * d + 1
                                  for pad, k, d in zip(begins, kernel, dilations))


def _ceil_windows(out: torch.Tensor, sizes, begins: List[int],
                  strides: List[int]) -> torch.Tensor:
    """``out`` of a ``ceil_mode`` pooling of an input padded by hand, cut to ONNX's window
    count: torch took the hand-made padding for input, so it kept a last window that
    starts in the right padding, which ONNX (as torch's own padding) drops.

    Example:
        >>> x = torch.tensor([[[1., 2., 3., 4.]]])
        >>> out = F.max_pool1d(F.pad(x, (0, 1), value=-9.), 2, 2, ceil_mode=True)
        >>> out, _ceil_windows(out, [4], [0], [2])
        (tensor([[[ 2.,  4., -9.]]]), tensor([[[2., 4.]]]))
    """
    index = [slice(None)] * (out.dim() - len(sizes))
    for size, begin, count, s in zip(sizes, begins, out.shape[2:], strides):
        while count > 1 and (count - 1) * s >= size + begin:
            count -= 1
        index.append(slice(0, count))
    return out[tuple(index)]


@register_kernel('MaxPool')
def _max_pool(op: Operation, device: torch.device):
    window = SlidingWindow(op, len(op.attributes['kernel_shape']))
    pool, rank = _MAX_POOL[window.rank], window.rank
    kernel_shape, strides, dilations = window.kernel, window.strides, window.dilations
    ceil_mode, with_indices = bool(op.attributes.get('ceil_mode', 0)), op.num_of_output > 1
    if with_indices and op.attributes.get('storage_order', 0):
        raise UnsupportedOperationError(op, 'storage_order=1 (column-major Indices)')

    def kernel(x):
        begins, ends = window.pads(x.shape[2:], kernel_shape)
        padding = begins
        if not _fits_torch(begins, ends, kernel_shape, dilations):
            if with_indices:
                raise UnsupportedOperationError(op, 'Indices with asymmetric or large pads')
            low = torch.finfo(x.dtype).min if x.is_floating_point() else torch.iinfo(x.dtype).min
            sizes = x.shape[2:]
            x = F.pad(x, torch_pads(begins, ends), value=low)
            out = pool(x, kernel_shape, strides, 0, dilations, ceil_mode)
            return _ceil_windows(out, sizes, begins, strides) if ceil_mode else out
        if not with_indices:
            return pool(x, kernel_shape, strides, padding, dilations, ceil_mode)
        out, indices = pool(x, kernel_shape, strides, padding, dilations, ceil_mode, True)
        plane = x.shape[2:].numel()
        offsets = torch.arange(x.shape[0] * x.shape[1], device=x.device) * plane
        return out, indices + offsets.reshape(x.shape[0], x.shape[1], *[1] * rank)
    return kernel


@register_kernel('AveragePool')
def _average_pool(op: Operation, device: torch.device):
    window = SlidingWindow(op, len(op.attributes['kernel_shape']))
    if any(d != 1 for d in window.dilations):
        raise UnsupportedOperationError(op, 'dilations other than 1')
    pool, kernel_shape, strides = _AVG_POOL[window.rank], window.kernel, window.strides
    ceil_mode = bool(op.attributes.get('ceil_mode', 0))
    include_pad = bool(op.attributes.get('count_include_pad', 0))

    def kernel(x):
        begins, ends = window.pads(x.shape[2:], kernel_shape)
        if _fits_torch(begins, ends, kernel_shape, window.dilations):
            return pool(x, kernel_shape, strides, begins, ceil_mode, include_pad)
        padded = F.pad(x, torch_pads(begins, ends))
        out = pool(padded, kernel_shape, strides, 0, ceil_mode, True)
        if not include_pad:
            ones = F.pad(torch.ones_like(x[:1, :1]), torch_pads(begins, ends))
            out = out / pool(ones, kernel_shape, strides, 0, ceil_mode, True)
        return _ceil_windows(out, x.shape[2:], begins, strides) if ceil_mode else out
    return kernel


def _global_dims(x: torch.Tensor) -> tuple:
    return tuple(range(2, x.dim()))


register_function(lambda x: x.mean(_global_dims(x), keepdim=True), 'GlobalAveragePool')
register_function(lambda x: x.amax(_global_dims(x), keepdim=True), 'GlobalMaxPool')
