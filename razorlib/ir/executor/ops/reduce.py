"""Reductions (ReduceMean, ReduceSum, ReduceMax, ...), ArgMax/ArgMin and CumSum."""
from typing import Callable, Dict, List, Tuple

import torch

from ...operation import Operation
from ..kernels import register_kernel
from .common import reader

__all__: List[str] = []


def _prod(x: torch.Tensor, dims: Tuple[int, ...], keepdim: bool) -> torch.Tensor:
    for dim in sorted((dim % x.dim() for dim in dims), reverse=True):
        x = x.prod(dim, keepdim=keepdim)
    return x


_REDUCERS: Dict[str, Callable[[torch.Tensor, Tuple[int, ...], bool], torch.Tensor]] = {
    'ReduceMean': lambda x, dims, keep: x.mean(dims, keepdim=keep),
    'ReduceSum': lambda x, dims, keep: x.sum(dims, keepdim=keep),
    'ReduceMax': lambda x, dims, keep: x.amax(dims, keepdim=keep),
    'ReduceMin': lambda x, dims, keep: x.amin(dims, keepdim=keep),
    'ReduceProd': _prod,
    'ReduceL1': lambda x, dims, keep: x.abs().sum(dims, keepdim=keep),
    'ReduceL2': lambda x, dims, keep: torch.linalg.vector_norm(x, 2, dims, keepdim=keep),
    'ReduceSumSquare': lambda x, dims, keep: (x * x).sum(dims, keepdim=keep),
    'ReduceLogSumExp': lambda x, dims, keep: torch.logsumexp(x, dims, keepdim=keep),
}


def _reduce_builder(reduce: Callable[[torch.Tensor, Tuple[int, ...], bool], torch.Tensor]):
    def build(op: Operation, device: torch.device):
        """Axes from the attribute (older opsets) or input 1; no axes reduces every dim,
        or nothing with ``noop_with_empty_axes``: then only the elementwise part applies
        (``|x|`` for ReduceL1 and ReduceL2, ``x * x`` for ReduceSumSquare, as
        onnxruntime and the ONNX reference compute it), a reduction over a new dim of
        one."""
        axes_of = reader(op, 1, attribute='axes')
        keep = bool(op.attributes.get('keepdims', 1))
        noop = op.attributes.get('noop_with_empty_axes', 0)

        def kernel(*inputs):
            x, axes = inputs[0], axes_of(inputs)
            if not axes:
                if noop:
                    return reduce(x.unsqueeze(0), (0, ), False)
                axes = range(x.dim())
            return reduce(x, tuple(axes), keep)
        return kernel
    return build


for _op_type, _reduce in _REDUCERS.items():
    register_kernel(_op_type)(_reduce_builder(_reduce))


def _arg_builder(arg: Callable[..., torch.Tensor]):
    def build(op: Operation, device: torch.device):
        """``select_last_index`` picks the last of equal extremes."""
        axis, keep = op.attributes.get('axis', 0), bool(op.attributes.get('keepdims', 1))
        if not op.attributes.get('select_last_index', 0):
            return lambda x: arg(x, axis, keepdim=keep)
        return lambda x: x.shape[axis] - 1 - arg(x.flip(axis), axis, keepdim=keep)
    return build


register_kernel('ArgMax')(_arg_builder(torch.argmax))
register_kernel('ArgMin')(_arg_builder(torch.argmin))


@register_kernel('CumSum')
def _cumsum(op: Operation, device: torch.device):
    """The axis from input 1 (a 0-d or one-element tensor); ``exclusive`` sums the
    elements before each one (0 first), ``reverse`` sums from the end.  The sum keeps
    the input's dtype, where torch's default sums an int32 tensor to int64."""
    axis_of = reader(op, 1, convert=lambda tensor: int(tensor.reshape(-1)[0]))
    exclusive, reverse = op.attributes.get('exclusive', 0), op.attributes.get('reverse', 0)

    def kernel(*inputs):
        x, axis = inputs[0], axis_of(inputs)
        if reverse:
            x = x.flip(axis)
        if exclusive and x.shape[axis]:
            x = torch.cat([torch.zeros_like(x.narrow(axis, 0, 1)),
                           x.narrow(axis, 0, x.shape[axis] - 1)], axis)
        out = torch.cumsum(x, axis, dtype=x.dtype)
        return out.flip(axis) if reverse else out
    return kernel
