"""Ops that select or assemble: Concat, Split, Slice, Gather, GatherElements, GatherND,
Pad."""
import math
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

from ...operation import Operation
from ..kernels import UnsupportedOperationError, register_kernel
from .common import constant_input, reader, split_pads, torch_pads

__all__: List[str] = []


@register_kernel('Concat')
def _concat(op: Operation, device: torch.device):
    axis = op.attributes['axis']
    return lambda *inputs: torch.cat(inputs, axis)


@register_kernel('Split')
def _split(op: Operation, device: torch.device):
    """Sizes from the ``split`` attribute (before opset 13) or input 1; else equal parts
    (the last one smaller when the size does not divide, opset 18)."""
    axis = op.attributes.get('axis', 0)
    sizes_of = reader(op, 1, attribute='split')
    parts = op.attributes.get('num_outputs', op.num_of_output)

    def kernel(*inputs):
        x, sizes = inputs[0], sizes_of(inputs)
        if sizes is None:
            sizes = -(-x.shape[axis] // parts)
        return torch.split(x, sizes, axis)
    return kernel


def _slice_bounds(start: int, end: int, step: int, size: int) -> Tuple[int, int]:
    """ONNX Slice clamping: [0, size] going forward, [0, size-1] / [-1, size-1] backward."""
    start, end = start + size if start < 0 else start, end + size if end < 0 else end
    if step > 0:
        return min(max(start, 0), size), min(max(end, 0), size)
    return min(max(start, 0), size - 1), min(max(end, -1), size - 1)


@register_kernel('Slice')
def _slice(op: Operation, device: torch.device):
    """Starts, ends, axes, steps from inputs 1-4 (opset 10+) or attributes (opset 1)."""
    starts_of = reader(op, 1, attribute='starts')
    ends_of = reader(op, 2, attribute='ends')
    axes_of = reader(op, 3, attribute='axes')
    steps_of = reader(op, 4)

    def kernel(*inputs):
        x, starts, ends = inputs[0], starts_of(inputs), ends_of(inputs)
        axes = axes_of(inputs) or list(range(len(starts)))
        steps = steps_of(inputs) or [1] * len(starts)
        index: List = [slice(None)] * x.dim()
        backward = []
        for start, end, axis, step in zip(starts, ends, axes, steps):
            start, end = _slice_bounds(start, end, step, x.shape[axis])
            if step > 0:
                index[axis] = slice(start, end, step)
            else:
                backward.append((axis % x.dim(), start, end, step))
        out = x[tuple(index)]
        for axis, start, end, step in backward:  # an empty range (start <= end) is empty
            positions = torch.arange(start, end, step, device=x.device) if start > end \
                else torch.zeros(0, dtype=torch.long, device=x.device)
            out = out.index_select(axis, positions)
        return out
    return kernel


def _positive(indices: torch.Tensor, size: int) -> torch.Tensor:
    return torch.where(indices < 0, indices + size, indices)


@register_kernel('Gather')
def _gather(op: Operation, device: torch.device):
    axis = op.attributes.get('axis', 0)
    constant = constant_input(op, 1)
    if constant is not None and constant.dim() == 0:
        position = int(constant)
        return lambda x, indices: x.select(axis, position)

    def kernel(x, indices):
        # The shape as one tuple: a 0-d index on a 1-D tensor gives a 0-d result, whose
        # empty shape ``reshape(*shape)`` would pass as no argument at all.
        picked = x.index_select(axis, _positive(indices, x.shape[axis]).reshape(-1))
        axis_ = axis % x.dim()
        return picked.reshape((*x.shape[:axis_], *indices.shape, *x.shape[axis_ + 1:]))
    return kernel


@register_kernel('GatherElements')
def _gather_elements(op: Operation, device: torch.device):
    axis = op.attributes.get('axis', 0)
    return lambda x, indices: torch.gather(x, axis, _positive(indices, x.shape[axis]))


@register_kernel('GatherND')
def _gather_nd(op: Operation, device: torch.device):
    """The last axis of ``indices`` holds positions (negative ones from the end) into the
    data's ``depth`` axes after its first ``batch_dims``, which data and indices share:
    the result is those batch axes, the other axes of ``indices``, then the data's axes
    past the indexed ones.  The batch axes are flattened into one, indexed alongside."""
    batch_dims = op.attributes.get('batch_dims', 0)

    def kernel(x, indices):
        batch, depth = x.shape[:batch_dims], indices.shape[-1]
        count = math.prod(batch)
        data = x.reshape(count, *x.shape[batch_dims:])
        sizes = torch.tensor(x.shape[batch_dims:batch_dims + depth], device=x.device)
        positions = _positive(indices.reshape(count, -1, depth), sizes)
        rows = torch.arange(count, device=x.device).unsqueeze(1).expand(positions.shape[:2])
        picked = data[(rows, *positions.unbind(-1))]
        return picked.reshape((*batch, *indices.shape[batch_dims:-1],
                               *x.shape[batch_dims + depth:]))
    return kernel


def _edge(positions: torch.Tensor, size: int) -> torch.Tensor:
    return positions.clamp(0, size - 1)


def _reflect(positions: torch.Tensor, size: int) -> torch.Tensor:
    if size == 1:
        return torch.zeros_like(positions)
    period = 2 * (size - 1)
    folded = positions % period
    return torch.where(folded >= size, period - folded, folded)


def _wrap(positions: torch.Tensor, size: int) -> torch.Tensor:
    return positions % size


_PAD_MODES: Dict[str, Callable[[torch.Tensor, int], torch.Tensor]] = {
    'edge': _edge, 'reflect': _reflect, 'wrap': _wrap}


def _full_pads(rank: int, pads: Sequence[int],
               axes: Optional[Sequence[int]]) -> Tuple[List[int], List[int]]:
    """Pads of every dim, from the pads of ``axes`` (all dims when None)."""
    if axes is None:
        return split_pads(pads, rank)
    begins, ends = [0] * rank, [0] * rank
    for axis, begin, end in zip(axes, pads[:len(axes)], pads[len(axes):]):
        begins[axis % rank], ends[axis % rank] = begin, end
    return begins, ends


@register_kernel('Pad')
def _pad(op: Operation, device: torch.device):
    """Modes constant, reflect, edge and wrap; negative pads crop, first (as onnxruntime:
    a wrap then repeats the cropped tensor); ``axes`` (opset 18)."""
    mode = op.attributes.get('mode', 'constant')
    if mode != 'constant' and mode not in _PAD_MODES:
        raise UnsupportedOperationError(op, f'mode {mode!r}')
    pads_of = reader(op, 1, attribute='pads')
    value_of = reader(op, 2, convert=lambda tensor: tensor.item(), attribute='value')
    axes_of = reader(op, 3)

    def kernel(*inputs):
        x = inputs[0]
        begins, ends = _full_pads(x.dim(), pads_of(inputs), axes_of(inputs))
        if mode == 'constant':
            value = value_of(inputs)
            return F.pad(x, torch_pads(begins, ends), value=0 if value is None else value)
        for axis, (begin, end) in enumerate(zip(begins, ends)):
            if begin < 0 or end < 0:
                cut = max(-begin, 0)
                x = x.narrow(axis, cut, x.shape[axis] - cut - max(-end, 0))
                begin, end = max(begin, 0), max(end, 0)
            if begin or end:
                size = x.shape[axis]
                positions = torch.arange(-begin, size + end, device=x.device)
                x = x.index_select(axis, _PAD_MODES[mode](positions, size))
        return x
    return kernel
