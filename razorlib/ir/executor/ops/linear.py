"""Conv, ConvTranspose, Gemm, MatMul and Einsum."""
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

from ...operation import Operation
from ..kernels import UnsupportedOperationError, register_function, register_kernel
from .common import SlidingWindow, torch_pads

__all__: List[str] = []

_CONV: Dict[int, Callable] = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
_CONV_TRANSPOSE: Dict[int, Callable] = {
    1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


def _spatial_rank(op: Operation) -> int:
    """Spatial dims, from the attributes or the weight's known shape."""
    for name in ('kernel_shape', 'strides', 'dilations'):
        if name in op.attributes:
            return len(op.attributes[name])
    if 'pads' in op.attributes:
        return len(op.attributes['pads']) // 2
    weight = op.inputs[1] if len(op.inputs) > 1 else None
    if weight is None or weight.shape is None:
        raise UnsupportedOperationError(op, 'a weight of unknown rank without kernel_shape')
    return len(weight.shape) - 2


@register_kernel('Conv')
def _conv(op: Operation, device: torch.device):
    window = SlidingWindow(op, _spatial_rank(op))
    conv, group = _CONV[window.rank], op.attributes.get('group', 1)
    strides, dilations = window.strides, window.dilations
    if not window.same and window.begins == window.ends:
        padding = window.begins
        return lambda x, w, b=None: conv(x, w, b, strides, padding, dilations, group)

    def kernel(x, w, b=None):
        begins, ends = window.pads(x.shape[2:], w.shape[2:])
        if begins != ends:
            x, begins = F.pad(x, torch_pads(begins, ends)), [0] * window.rank
        return conv(x, w, b, strides, begins, dilations, group)
    return kernel


@register_kernel('ConvTranspose')
def _conv_transpose(op: Operation, device: torch.device):
    window = SlidingWindow(op, _spatial_rank(op))
    conv = _CONV_TRANSPOSE[window.rank]
    group, strides, dilations = op.attributes.get('group', 1), window.strides, window.dilations
    output_padding = list(op.attributes.get('output_padding', [0] * window.rank))
    output_shape = op.attributes.get('output_shape')
    if output_shape is None and not window.same and window.begins == window.ends:
        padding = window.begins
        return lambda x, w, b=None: conv(x, w, b, strides, padding, output_padding,
                                         group, dilations)

    def kernel(x, w, b=None):
        full = conv(x, w, None, strides, 0, 0, group, dilations)
        begins, ends = _transpose_pads(window, x.shape[2:], w.shape[2:], output_padding,
                                       output_shape)
        crop = torch_pads([-begin for begin in begins],
                          [pad - end for pad, end in zip(output_padding, ends)])
        out = F.pad(full, crop)
        return out if b is None else out + b.reshape(-1, *[1] * window.rank)
    return kernel


def _transpose_pads(window: SlidingWindow, sizes: Sequence[int], kernel: Sequence[int],
                    output_padding: Sequence[int],
                    output_shape: Optional[Sequence[int]]) -> Tuple[List[int], List[int]]:
    """ConvTranspose pads; from the wanted output shape when there is one or auto_pad."""
    if output_shape is None and not window.same:
        return window.begins, window.ends
    if output_shape is None:
        output_shape = [size * stride for size, stride in zip(sizes, window.strides)]
    begins, ends = [], []
    for size, k, stride, dilation, pad, out in zip(sizes, kernel, window.strides,
                                                   window.dilations, output_padding,
                                                   output_shape[-window.rank:]):
        total = stride * (size - 1) + pad + (k - 1) * dilation + 1 - out
        small, large = total // 2, total - total // 2
        begins.append(small if window.auto_pad == 'SAME_UPPER' else large)
        ends.append(large if window.auto_pad == 'SAME_UPPER' else small)
    return begins, ends


@register_kernel('Gemm')
def _gemm(op: Operation, device: torch.device):
    attributes = op.attributes
    trans_a, trans_b = attributes.get('transA', 0), attributes.get('transB', 0)
    alpha, beta = attributes.get('alpha', 1.0), attributes.get('beta', 1.0)
    if not trans_a and trans_b and alpha == 1.0 and beta == 1.0:
        return F.linear

    def kernel(a, b, c=None):
        out = (a.t() if trans_a else a) @ (b.t() if trans_b else b)
        if alpha != 1.0:
            out = out * alpha
        if c is not None:
            out = out + (c * beta if beta != 1.0 else c)
        return out
    return kernel


register_function(torch.matmul, 'MatMul')


@register_kernel('Einsum')
def _einsum(op: Operation, device: torch.device):
    """torch reads ONNX's equations as they are: spaces, ``...`` and the implicit output
    (the labels seen once, in alphabetical order) alike."""
    equation = op.attributes['equation']
    return lambda *inputs: torch.einsum(equation, *inputs)
