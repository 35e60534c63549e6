"""FuseGemm: turn MatMul of a 2-D input by a constant, plus a constant bias, into a Gemm."""
from typing import List

from ...registry import GRAPH_PASSES
from ..graph import BaseGraph
from ..operation import Operation
from .base import GraphPass, PassResult
from .common import constant_value, other_input, replace_with_operation, rewrite_matches

__all__ = ['FuseGemm']


@GRAPH_PASSES.register_module(name=['FuseGemm', 'fuse_gemm'])
class FuseGemm(GraphPass):
    """Replace ``Add(MatMul(x, W), b)`` by ``Gemm(x, W, b)``.

    Only where Gemm computes the same thing: ``x`` is known to be 2-D (an N-D MatMul
    stays as it is), ``W`` is a 2-D constant, ``b`` a constant of one value per output
    column or one value (``(N,)``, ``(1, N)``, ``(1,)``, a scalar), and the MatMul feeds
    only the Add.  The Gemm takes the MatMul's name and writes the Add's output.

    ``changes`` counts the MatMul + Add pairs that became a Gemm.

    Example:
        >>> import torch
        >>> from razorlib.ir import BaseGraph
        >>> graph = BaseGraph()
        >>> x = graph.create_variable('x', shape=('batch', 3))
        >>> graph.mark_variable_as_graph_input(x)
        >>> w = graph.create_variable('w', torch.randn(3, 4), is_parameter=True)
        >>> mm = graph.create_operation('MatMul', 'mm', inputs=[x, w],
        ...                             outputs=[graph.create_variable('y')])
        >>> b = graph.create_variable('b', torch.zeros(4), is_parameter=True)
        >>> add = graph.create_operation('Add', 'add', inputs=[mm.outputs[0], b],
        ...                              outputs=[graph.create_variable('z')])
        >>> FuseGemm()(graph).changes
        1
        >>> [(op.type, [var.name for var in op.inputs], op.outputs[0].name)
        ...  for op in graph.operations.values()]
        [('Gemm', ['x', 'w', 'b'], 'z')]
    """

    def call(self, graph: BaseGraph) -> PassResult:
        """Rewrite ``graph``; the result counts the MatMul + Add pairs that became a Gemm."""
        fused = rewrite_matches(graph, ['MatMul', 'Add'], [(0, 1)], _fuse, name='fuse_gemm')
        return PassResult.counted(graph, fused)


def _fuse(graph: BaseGraph, match: List[Operation]) -> bool:
    matmul, add = match
    data, weight_var = matmul.inputs
    weight = constant_value(graph, weight_var)
    bias_var = other_input(add, matmul.outputs[0])
    bias = None if bias_var is None else constant_value(graph, bias_var)
    if (data.shape is None or len(data.shape) != 2 or constant_value(graph, data) is not None
            or weight is None or weight.dim() != 2 or bias is None or bias.dim() > 2
            or any(size != 1 for size in bias.shape[:-1])
            or bias.shape[-1:] not in ((), (1, ), (weight.shape[1], ))):
        return False
    replace_with_operation(graph, match, 'Gemm', [data, weight_var, bias_var], add.outputs[0],
                           opset=matmul.opset)
    return True
