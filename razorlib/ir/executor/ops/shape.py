"""Shape and type ops: Reshape, Flatten, Transpose, (Un)Squeeze, Shape, Expand, Cast, constants."""
import math
from typing import List

import torch

from ...onnx_types import torch_dtype
from ...operation import Operation
from ..kernels import UnsupportedOperationError, register_function, register_kernel
from .common import reader

__all__: List[str] = []


@register_kernel('Reshape')
def _reshape(op: Operation, device: torch.device):
    """A 0 copies the input's size (unless ``allowzero``); -1 is inferred."""
    shape_of = reader(op, 1, attribute='shape')
    allow_zero = op.attributes.get('allowzero', 0)

    def kernel(*inputs):
        x, shape = inputs[0], shape_of(inputs)
        if not allow_zero and 0 in shape:
            shape = [x.shape[i] if size == 0 else size for i, size in enumerate(shape)]
        return x.reshape(shape)
    return kernel


@register_kernel('Flatten')
def _flatten(op: Operation, device: torch.device):
    axis = op.attributes.get('axis', 1)

    def kernel(x):
        split = axis % x.dim() if axis < 0 else axis
        return x.reshape(math.prod(x.shape[:split]), math.prod(x.shape[split:]))
    return kernel


@register_kernel('Transpose')
def _transpose(op: Operation, device: torch.device):
    perm = op.attributes.get('perm')
    if perm is None:
        return lambda x: x.permute(tuple(reversed(range(x.dim()))))  # () for a 0-d x
    return lambda x: x.permute(perm)


@register_kernel('Squeeze')
def _squeeze(op: Operation, device: torch.device):
    """Axes from the attribute (before opset 13) or input 1; none squeezes every 1."""
    axes_of = reader(op, 1, attribute='axes')

    def kernel(*inputs):
        axes = axes_of(inputs)
        return inputs[0].squeeze() if axes is None else inputs[0].squeeze(tuple(axes))
    return kernel


@register_kernel('Unsqueeze')
def _unsqueeze(op: Operation, device: torch.device):
    """Axes (attribute before opset 13, else input 1) index the output's dims."""
    axes_of = reader(op, 1, attribute='axes')

    def kernel(*inputs):
        x, axes = inputs[0], axes_of(inputs)
        rank = x.dim() + len(axes)
        for axis in sorted(axis % rank for axis in axes):
            x = x.unsqueeze(axis)
        return x
    return kernel


@register_kernel('Shape')
def _shape(op: Operation, device: torch.device):
    start, end = op.attributes.get('start', 0), op.attributes.get('end')
    return lambda x: torch.tensor(x.shape[start:end], dtype=torch.int64, device=x.device)


register_function(lambda x: torch.tensor(x.numel(), dtype=torch.int64, device=x.device),
                  'Size')


@register_kernel('Expand')
def _expand(op: Operation, device: torch.device):
    """Two-way broadcast of the input with the shape (a 1 in the shape keeps the size)."""
    shape_of = reader(op, 1)

    def kernel(*inputs):
        x = inputs[0]
        return x.expand(torch.broadcast_shapes(x.shape, tuple(shape_of(inputs))))
    return kernel


@register_kernel('Tile')
def _tile(op: Operation, device: torch.device):
    repeats_of = reader(op, 1)
    return lambda *inputs: inputs[0].repeat(repeats_of(inputs))


register_function(lambda x: x, 'Identity')


@register_kernel('Dropout')
def _dropout(op: Operation, device: torch.device):
    """Inference: the identity, and an all-true mask when the mask output is wanted."""
    if op.num_of_output > 1:
        return lambda x, *rest: (x, torch.ones_like(x, dtype=torch.bool))
    return lambda x, *rest: x


@register_kernel('Cast')
def _cast(op: Operation, device: torch.device):
    dtype = torch_dtype(op.attributes['to'])
    return lambda x: x.to(dtype)


register_function(lambda x, like: x.to(like.dtype), 'CastLike')

_CONSTANT_ATTRIBUTES = {
    'value': lambda value: value,
    'value_float': lambda value: torch.tensor(value, dtype=torch.float32),
    'value_floats': lambda value: torch.tensor(value, dtype=torch.float32),
    'value_int': lambda value: torch.tensor(value, dtype=torch.int64),
    'value_ints': lambda value: torch.tensor(value, dtype=torch.int64),
}


@register_kernel('Constant')
def _constant(op: Operation, device: torch.device):
    for name, convert in _CONSTANT_ATTRIBUTES.items():
        if name in op.attributes:
            value = convert(op.attributes[name]).to(device)
            return lambda: value
    raise UnsupportedOperationError(op, f'a constant given by {sorted(op.attributes)}')


@register_kernel('ConstantOfShape')
def _constant_of_shape(op: Operation, device: torch.device):
    value = op.attributes.get('value', torch.zeros(1))
    fill, dtype = value.reshape(-1)[0].item(), value.dtype
    shape_of = reader(op, 0)
    return lambda *inputs: torch.full(shape_of(inputs), fill, dtype=dtype, device=device)


def _range(start: torch.Tensor, limit: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    """ONNX Range: ``max(ceil((limit - start) / delta), 0)`` elements, so a ``limit`` on the
    wrong side of ``start`` (``Range(5, 0, 1)``) gives an empty tensor, which
    ``torch.arange`` refuses (its bounds "inconsistent with step sign")."""
    first, last, step = start.item(), limit.item(), delta.item()
    if (last - first) * step <= 0 and step != 0:
        return torch.empty(0, dtype=start.dtype, device=start.device)
    return torch.arange(first, last, step, dtype=start.dtype, device=start.device)


register_function(_range, 'Range')
