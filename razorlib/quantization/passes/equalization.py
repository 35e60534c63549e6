"""LayerwiseEqualization: cross-layer equalization of consecutive layers' weight ranges.

Nagel et al., *Data-Free Quantization Through Weight Equalization and Bias Correction*
(2019), as PPQ's layerwise equalization: for two layers ``y = W2 f(W1 x + b1) + b2`` with
a positively homogeneous ``f`` between them (nothing, ReLU, LeakyReLU: ``f(s x) = s f(x)``
for ``s > 0``), output channel ``i`` of the first layer is divided by ``s_i`` and input
channel ``i`` of the second multiplied by it, with ``s_i = sqrt(r1_i / r2_i)`` (``r1``,
``r2``: the channels' largest weight magnitudes), which gives both the range
``sqrt(r1_i r2_i)``.  The network computes the same function; the activation between the
two layers, quantized per tensor, no longer has channels of very different ranges, and
per-tensor weights neither.  ReLU6 (a Clip) is not positively homogeneous: pairs joined
by one are left alone.
"""
import logging
from typing import List, Optional, Tuple

import torch

from ...ir import BaseGraph, Operation, PassResult
from ...registry import PTQ_PASSES
from ...utils.checks import integer_number, real_number
from .base import PTQPass
from .layers import is_channel_layer, sole_reader

logger = logging.getLogger(__name__)

__all__ = ['LayerwiseEqualization', 'equalizable_pairs', 'layer_after', 'rescale_pair']

_HOMOGENEOUS = ('Relu', 'LeakyRelu')


def _weight_grid(op: Operation, weight: torch.Tensor) -> torch.Tensor:
    """The weight as ``(groups, out / groups, in / groups, rest)``."""
    if op.type == 'Gemm':
        matrix = weight if op.attributes.get('transB', 0) else weight.t()
        return matrix.reshape(1, matrix.shape[0], matrix.shape[1], 1)
    groups = op.attributes.get('group', 1)
    return weight.reshape(groups, weight.shape[0] // groups, weight.shape[1], -1)


def _from_grid(op: Operation, grid: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    if op.type == 'Gemm':
        matrix = grid.reshape(grid.shape[1], grid.shape[2])
        return matrix if op.attributes.get('transB', 0) else matrix.t().contiguous()
    return grid.reshape(like.shape)


def _out_ranges(op: Operation) -> torch.Tensor:
    grid = _weight_grid(op, op.inputs[1].value).abs()
    return grid.amax(dim=(2, 3)).reshape(-1)


def _in_ranges(op: Operation) -> torch.Tensor:
    grid = _weight_grid(op, op.inputs[1].value).abs()
    return grid.amax(dim=(1, 3)).reshape(-1)


def layer_after(graph: BaseGraph, first: Operation, through: Operation) -> Optional[Operation]:
    """The weight layer that alone reads ``through``'s output (``through`` is ``first``
    or the activation after it) as its data input, with as many input channels as
    ``first`` has output channels; None if there is none."""
    second = sole_reader(graph, through)
    if (second is None or not is_channel_layer(second) or second.inputs[0] is not through.outputs[0]
            or _out_ranges(first).numel() != _in_ranges(second).numel()):
        return None
    return second


def equalizable_pairs(graph: BaseGraph) -> List[Tuple[Operation, Operation]]:
    """Every ``(first, second)`` layer pair that equalization may rescale.

    ``first`` (a Conv, or a Gemm without ``transA``, with a parameter weight) feeds
    ``second`` (the same kinds) through nothing or one ReLU / LeakyReLU, read by nothing
    else and no graph output; ``second`` reads it as its data input and has as many input
    channels as ``first`` has output channels.

    Example:
        >>> import torch
        >>> from razorlib.ir import BaseGraph
        >>> graph = BaseGraph()
        >>> v = graph.create_variable('x')
        >>> graph.mark_variable_as_graph_input(v)
        >>> for name, op_type, w in (('c1', 'Conv', torch.randn(4, 3, 1, 1)), ('r', 'Relu', None),
        ...                          ('c2', 'Conv', torch.randn(2, 4, 1, 1))):
        ...     inputs = [v] + ([graph.create_variable(name + '.w', w, is_parameter=True)]
        ...                     if w is not None else [])
        ...     v = graph.create_operation(op_type, name, inputs=inputs,
        ...                                outputs=[graph.create_variable(name + '.y')]).outputs[0]
        >>> graph.mark_variable_as_graph_output(v)
        >>> [(a.name, b.name) for a, b in equalizable_pairs(graph)]
        [('c1', 'c2')]
    """
    pairs = []
    for first in graph.topological_sort():
        if not is_channel_layer(first):
            continue
        middle = sole_reader(graph, first)
        homogeneous = (middle is not None and middle.type in _HOMOGENEOUS
                       and len(middle.inputs) == 1)
        second = layer_after(graph, first, middle if homogeneous else first)
        if second is None:
            continue
        pairs.append((first, second))
    return pairs


def rescale_pair(first: Operation, second: Operation, factor: torch.Tensor) -> None:
    """Multiply output channel ``i`` of ``first`` (weights and bias) by ``factor[i]`` and
    divide input channel ``i`` of ``second`` by it, in place: through a positively
    homogeneous activation (or a clip the channel never reaches) the pair computes the
    same function."""
    w1 = first.inputs[1].value
    grid1 = _weight_grid(first, w1)
    first.inputs[1].value = _from_grid(
        first, grid1 * factor.to(w1).reshape(grid1.shape[0], grid1.shape[1], 1, 1), w1)
    if len(first.inputs) > 2 and first.inputs[2].value is not None:
        first.inputs[2].value = first.inputs[2].value * factor.to(first.inputs[2].value)
    w2 = second.inputs[1].value
    grid2 = _weight_grid(second, w2)
    second.inputs[1].value = _from_grid(
        second, grid2 / factor.to(w2).reshape(grid2.shape[0], 1, grid2.shape[2], 1), w2)


def _equalize(first: Operation, second: Operation, max_factor: float) -> float:
    """Rescale one pair in place; the largest ``|log s|`` applied."""
    r1, r2 = _out_ranges(first), _in_ranges(second)
    scale = torch.ones_like(r1)
    valid = (r1 > 0) & (r2 > 0)
    scale[valid] = (r1[valid] / r2[valid]).sqrt()
    scale = scale.clamp(1.0 / max_factor, max_factor)
    rescale_pair(first, second, 1.0 / scale)
    return float(scale.log().abs().max()) if scale.numel() else 0.0


@PTQ_PASSES.register_module(name=['LayerwiseEqualization', 'equalization'])
class LayerwiseEqualization(PTQPass):
    """Equalize the weight ranges of consecutive layers (see the module docstring).

    Runs on the FP32 graph, before quantization (``stage = 'float'``), after the graph
    passes folded BatchNorm into the convolutions; reads no data.  The pairs are
    rescaled in topological order, ``iterations`` rounds or until no channel's factor
    moves by more than ``tolerance`` (a chain of three layers needs several rounds).

    Args:
        iterations: the most rounds.
        tolerance: stop when the largest ``|log s|`` of a round is below it.
        max_factor: each factor is clamped to ``[1 / max_factor, max_factor]`` per round,
            so a channel whose weights are all but zero is not blown up.

    Example:
        >>> import torch
        >>> from razorlib.ir import BaseGraph, TorchExecutor
        >>> _ = torch.manual_seed(0)
        >>> graph = BaseGraph()
        >>> v = graph.create_variable('x')
        >>> graph.mark_variable_as_graph_input(v)
        >>> spread = torch.logspace(-2, 2, 8)  # channel ranges from 0.01 to 100
        >>> w1 = torch.randn(8, 3, 1, 1) * spread[:, None, None, None]
        >>> w2 = torch.randn(4, 8, 1, 1) / spread[None, :, None, None]
        >>> for name, op_type, w in (('c1', 'Conv', w1), ('r', 'Relu', None), ('c2', 'Conv', w2)):
        ...     inputs = [v] + ([graph.create_variable(name + '.w', w, is_parameter=True)]
        ...                     if w is not None else [])
        ...     v = graph.create_operation(op_type, name, inputs=inputs,
        ...                                outputs=[graph.create_variable(name + '.y')]).outputs[0]
        >>> graph.mark_variable_as_graph_output(v)
        >>> x = torch.randn(2, 3, 4, 4)
        >>> before = TorchExecutor(graph)(x)[0]
        >>> LayerwiseEqualization()(graph, []).changes
        1
        >>> ranges = graph.variables['c1.w'].value.abs().amax(dim=(1, 2, 3))
        >>> bool(ranges.max() / ranges.min() < 10), torch.allclose(TorchExecutor(graph)(x)[0],
        ...                                                        before, rtol=1e-4, atol=1e-5)
        (True, True)
    """

    stage = 'float'

    def __init__(self, iterations: int = 10, tolerance: float = 1e-3,
                 max_factor: float = 100.0) -> None:
        iterations = integer_number(iterations, 'LayerwiseEqualization: iterations',
                                    'rounds at most', minimum=1)
        tolerance = real_number(tolerance, 'LayerwiseEqualization: tolerance')
        max_factor = real_number(max_factor, 'LayerwiseEqualization: max_factor')
        if tolerance < 0 or max_factor <= 1:
            raise ValueError(f'LayerwiseEqualization: tolerance must be >= 0 and max_factor '
                             f'> 1, got {tolerance} and {max_factor}')
        self.iterations, self.tolerance, self.max_factor = iterations, tolerance, max_factor

    def call(self, graph: BaseGraph, batches: list, device) -> PassResult:
        """Equalize every pair of :func:`equalizable_pairs`; ``changes`` counts the pairs."""
        pairs = equalizable_pairs(graph)
        dtypes = {var: var.value.dtype for pair in pairs for op in pair for var in op.parameters}
        for variable in dtypes:
            variable.value = variable.value.double()  # the rounds multiply in float64
        rounds = 0
        try:
            for rounds in range(1, self.iterations + 1):
                moved = max((_equalize(a, b, self.max_factor) for a, b in pairs), default=0.0)
                if moved < self.tolerance:
                    break
        finally:
            for variable, dtype in dtypes.items():
                variable.value = variable.value.to(dtype)
        logger.info('LayerwiseEqualization: %d layer pairs of graph %r, %d rounds', len(pairs),
                    graph.name, rounds)
        return PassResult.counted(graph, len(pairs))
