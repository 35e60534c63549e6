"""ReduceMeanToGlobalPool: write a mean over all spatial axes as GlobalAveragePool."""
from typing import Optional, Tuple

import torch

from ...registry import GRAPH_PASSES
from ..graph import BaseGraph
from ..operation import Operation
from .base import GraphPass, PassResult
from .common import constant_value, fresh_name

__all__ = ['ReduceMeanToGlobalPool']

_FLOAT_TYPES = (torch.float16, torch.float32, torch.float64)
"""The dtypes GlobalAveragePool takes."""
_RANKS = (3, 4, 5)
"""N, C and 1 to 3 spatial axes: the pools onnxruntime and TensorRT run."""


@GRAPH_PASSES.register_module(name=['ReduceMeanToGlobalPool', 'reduce_mean_to_pool'])
class ReduceMeanToGlobalPool(GraphPass):
    """Replace a ReduceMean over exactly the spatial axes of an N, C, ... tensor.

    Why: the exporters disagree on global average pooling.  The TorchScript exporter
    writes ``AdaptiveAvgPool2d(1)`` as GlobalAveragePool; the dynamo exporter
    (``from_torch``'s default) writes it, and ``x.mean((2, 3))``, as ReduceMean, which no
    platform quantizes, so the conservative dispatcher stops there and the classifier head
    after it (Reshape/Flatten, Gemm) stays in FP32 on ORT_INT8.  Written as the op it
    stands for, the model quantizes the same way whichever exporter wrote it.

    A ReduceMean of the default domain whose input has a known rank of 3, 4 or 5 and a
    floating dtype, and whose axes (the ``axes`` attribute before opset 18, a constant
    input 1 from opset 18 on) are exactly 2 .. rank-1 in any order or sign, becomes a
    GlobalAveragePool: alone with ``keepdims=1`` (the default), followed by
    ``Flatten(axis=1)`` to (N, C) with ``keepdims=0``.  Both compute the same mean of the
    same values; the last operation writes the ReduceMean's output variable, and the
    pool keeps the ReduceMean's name and opset.  Any other ReduceMean (over N or C, over
    part of the spatial axes, with axes computed at run time or unknown shapes) stays.
    Run it after ``FormatConstant`` (axes from a Constant node are read as parameters)
    and after ``FuseLayerNorm`` (whose ReduceMeans it would otherwise take).

    ``changes`` counts the ReduceMeans replaced.

    Example:
        >>> from razorlib.ir import BaseGraph, TorchExecutor
        >>> graph = BaseGraph()
        >>> x = graph.create_variable('x', shape=('N', 8, 5, 5), dtype=torch.float32)
        >>> graph.mark_variable_as_graph_input(x)
        >>> axes = graph.create_variable('axes', torch.tensor([-1, -2]), is_parameter=True)
        >>> mean = graph.create_operation('ReduceMean', 'mean', {'keepdims': 0},
        ...                               inputs=[x, axes], outputs=[graph.create_variable('y')],
        ...                               opset=18)
        >>> graph.mark_variable_as_graph_output(mean.outputs[0])
        >>> images = torch.randn(2, 8, 5, 5)
        >>> expected = TorchExecutor(graph)(images)[0]
        >>> ReduceMeanToGlobalPool()(graph).changes
        1
        >>> [(op.type, [var.name for var in op.outputs]) for op in graph.topological_sort()]
        [('GlobalAveragePool', ['mean.pooled']), ('Flatten', ['y'])]
        >>> got = TorchExecutor(graph)(images)[0]
        >>> got.shape, torch.equal(got, expected), 'axes' in graph.variables
        (torch.Size([2, 8]), True, False)
    """

    def call(self, graph: BaseGraph) -> PassResult:
        """Rewrite ``graph``; the result counts the ReduceMeans replaced."""
        means = [op for op in graph.operations.values()
                 if op.type == 'ReduceMean' and op.opset.domain == '' and _is_global(graph, op)]
        for op in means:
            _rewrite(graph, op)
        return PassResult.counted(graph, len(means))


def _axes(graph: BaseGraph, op: Operation) -> Optional[Tuple[int, ...]]:
    """The ReduceMean's axes when fixed: the attribute, or a constant input 1."""
    if 'axes' in op.attributes:
        return tuple(op.attributes['axes'])
    value = constant_value(graph, op.inputs[1]) if op.num_of_input > 1 else None
    return None if value is None else tuple(int(axis) for axis in value.reshape(-1).tolist())


def _is_global(graph: BaseGraph, op: Operation) -> bool:
    """Whether ``op`` averages exactly the spatial axes of a float N, C, ... tensor."""
    x, axes = op.inputs[0], _axes(graph, op)
    if x.shape is None or len(x.shape) not in _RANKS or x.dtype not in _FLOAT_TYPES:
        return False
    rank = len(x.shape)
    return (axes is not None and all(-rank <= axis < rank for axis in axes)
            and sorted(axis % rank for axis in axes) == list(range(2, rank)))


def _rewrite(graph: BaseGraph, op: Operation) -> None:
    """Put GlobalAveragePool (then Flatten without ``keepdims``) in place of ``op``."""
    x, output = op.inputs[0], op.outputs[0]
    keepdims = op.attributes.get('keepdims', 1)
    graph.remove_operation(op)  # and the axes parameter, when only it read them
    pooled = output
    if not keepdims:
        pooled = graph.create_variable(fresh_name(graph.variables, f'{op.name}.pooled'),
                                       shape=(*x.shape[:2], *[1] * (len(x.shape) - 2)),
                                       dtype=x.dtype)
    graph.create_operation('GlobalAveragePool', op.name, inputs=[x], outputs=[pooled],
                           platform=op.platform, opset=op.opset)
    if not keepdims:
        graph.create_operation('Flatten', fresh_name(graph.operations, f'{op.name}.flatten'),
                               {'axis': 1}, inputs=[pooled], outputs=[output],
                               platform=op.platform, opset=op.opset)
