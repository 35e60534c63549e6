"""Conv, ConvTranspose, Gemm and MatMul seen as ``y = x * W + b``, and folding into them."""
from dataclasses import dataclass
from typing import Callable, Dict, NamedTuple, Optional

import torch

from ..graph import BaseGraph
from ..operation import Operation
from .common import (constant_value, has_input, new_parameter, replace_with_operation,
                     within_rank, writable_parameter)

__all__ = ['LINEAR_TYPES', 'LinearView', 'fold_into_linear', 'linear_view']


def _conv_multiplier(op: Operation, weight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Weight (out, in / group, k...): output channels on axis 0."""
    return scale.reshape(-1, *[1] * (weight.dim() - 1))


def _conv_transpose_multiplier(op: Operation, weight: torch.Tensor,
                               scale: torch.Tensor) -> torch.Tensor:
    """Weight (in, out / group, k...): group g's input rows feed its block of outputs."""
    group = op.attributes.get('group', 1)
    in_channels, per_group = weight.shape[:2]
    grid = scale.reshape(group, 1, per_group).expand(group, in_channels // group, per_group)
    return grid.reshape(in_channels, per_group, *[1] * (weight.dim() - 2))


def _gemm_multiplier(op: Operation, weight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Weight (out, in) with transB, else (in, out)."""
    return scale[:, None] if op.attributes.get('transB', 0) else scale


class _Layout(NamedTuple):
    weight_ranks: range
    channels: Callable[[Operation, torch.Tensor], int]
    multiplier: Callable[[Operation, torch.Tensor, torch.Tensor], torch.Tensor]


_LAYOUTS: Dict[str, _Layout] = {
    'Conv': _Layout(range(3, 6), lambda op, w: w.shape[0], _conv_multiplier),
    'ConvTranspose': _Layout(range(3, 6), lambda op, w: w.shape[1] * op.attributes.get('group', 1),
                             _conv_transpose_multiplier),
    'Gemm': _Layout(range(2, 3), lambda op, w: w.shape[0 if op.attributes.get('transB', 0) else 1],
                    _gemm_multiplier),
    'MatMul': _Layout(range(2, 3), lambda op, w: w.shape[1], lambda op, w, s: s),
}

LINEAR_TYPES = tuple(_LAYOUTS)
"""The op types :func:`linear_view` understands."""


@dataclass
class LinearView:
    """A linear operation whose weight (and bias, if any) are constants.

    Output channels lie on axis 1 of the output, which has as many dims as the weight.

    Args:
        op: the operation.
        weight: its weight tensor.
        channels: how many output channels it has.
        bias: the bias it adds, broadcastable to the output (zeros when it has none;
            ``beta * C`` for a Gemm).

    Example:
        >>> import torch
        >>> from razorlib.ir import BaseGraph
        >>> graph = BaseGraph()
        >>> w = graph.create_variable('w', torch.ones(4, 3, 1, 1), is_parameter=True)
        >>> conv = graph.create_operation('Conv', inputs=[graph.create_variable('x'), w])
        >>> view = linear_view(graph, conv)
        >>> view.channels, view.bias.tolist()
        (4, [0.0, 0.0, 0.0, 0.0])
    """
    op: Operation
    weight: torch.Tensor
    channels: int
    bias: torch.Tensor

    def multiplier(self, scale: torch.Tensor) -> torch.Tensor:
        """``scale`` (one factor per output channel) shaped to multiply the weight."""
        return _LAYOUTS[self.op.type].multiplier(self.op, self.weight, scale)

    def channel_vector(self, value: torch.Tensor) -> Optional[torch.Tensor]:
        """A constant added to the output as one value per channel, or None if it is not.

        Args:
            value: a tensor broadcast against the output.

        Returns:
            A 1-D tensor of ``channels`` values, when ``value`` varies only along axis 1
            and does not widen the output; else None.
        """
        rank = self.weight.dim()
        if not within_rank(value, rank):
            return None
        shape = [1] * (rank - value.dim()) + list(value.shape)
        if any(size != 1 for axis, size in enumerate(shape) if axis != 1) or \
                shape[1] not in (1, self.channels):
            return None
        return value.reshape(-1).expand(self.channels).clone()


def linear_view(graph: BaseGraph, op: Operation) -> Optional[LinearView]:
    """The :class:`LinearView` of ``op``, or None when it is no such linear operation.

    A MatMul qualifies only with a 2-D data input of known rank: past two dims its output
    channels would not lie on axis 1.
    """
    layout = _LAYOUTS.get(op.type)
    if layout is None or op.num_of_input < 2:
        return None
    weight = constant_value(graph, op.inputs[1])
    if weight is None or weight.dim() not in layout.weight_ranks or not weight.is_floating_point():
        return None
    data_shape = op.inputs[0].shape
    if op.type == 'MatMul' and (data_shape is None or len(data_shape) != 2):
        return None
    channels = layout.channels(op, weight)
    bias = torch.zeros(channels, dtype=weight.dtype)
    if has_input(op, 2):
        value = constant_value(graph, op.inputs[2])
        if value is None:
            return None
        bias = value * op.attributes.get('beta', 1.0) if op.type == 'Gemm' else value
    return LinearView(op, weight, channels, bias)


def fold_into_linear(graph: BaseGraph, view: LinearView, absorbed: Operation,
                     weight: Optional[torch.Tensor], bias: torch.Tensor) -> Operation:
    """Replace ``view.op`` and the ``absorbed`` operation after it by one linear operation.

    The new operation has the linear operation's type (a MatMul becomes a Gemm, to hold
    the bias), attributes and name, reads its data input, ``weight`` (None keeps the
    weight) and ``bias``, and writes ``absorbed``'s output.

    Args:
        graph: the graph.
        view: the linear operation.
        absorbed: the operation after it, whose output the new operation writes.
        weight: the new weight, or None.
        bias: the new bias (``C`` with ``beta = 1`` for a Gemm).

    Returns:
        The new operation.
    """
    op = view.op
    weight_var = op.inputs[1]
    if weight is not None:
        weight_var = writable_parameter(graph, weight_var, weight.to(view.weight.dtype), [op])
    bias = bias.to(view.weight.dtype)
    if has_input(op, 2):
        bias_var = writable_parameter(graph, op.inputs[2], bias, [op])
    else:
        bias_var = new_parameter(graph, f'{op.name}.bias', bias)
    op_type = 'Gemm' if op.type == 'MatMul' else op.type
    attributes = dict(op.attributes, beta=1.0) if op_type == 'Gemm' else dict(op.attributes)
    return replace_with_operation(graph, [op, absorbed], op_type,
                                  [op.inputs[0], weight_var, bias_var], absorbed.outputs[0],
                                  attributes, op.opset, op.name)
