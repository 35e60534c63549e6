"""FormatConstant: replace Constant operations by parameters holding their values."""
import torch

from ..executor import UnsupportedOperationError, build_kernel
from ...registry import GRAPH_PASSES
from ..graph import BaseGraph
from .base import GraphPass, PassResult

__all__ = ['FormatConstant']


@GRAPH_PASSES.register_module(name=['FormatConstant', 'format_constant'])
class FormatConstant(GraphPass):
    """Remove each Constant operation; its output becomes a parameter holding the value.

    The value is what the executor's Constant kernel computes; constants it cannot hold
    (strings, sparse tensors) stay as they are.

    ``changes`` counts the Constant operations replaced.

    Example:
        >>> from razorlib.ir import BaseGraph
        >>> graph = BaseGraph()
        >>> two = graph.create_variable('two')
        >>> constant = graph.create_operation('Constant', 'c', {'value_float': 2.0},
        ...                                   outputs=[two])
        >>> mul = graph.create_operation('Mul', 'mul', inputs=[graph.create_variable('x'), two])
        >>> FormatConstant()(graph).changes, list(graph.operations), two.is_parameter, two.value
        (1, ['mul'], True, tensor(2.))
    """

    def call(self, graph: BaseGraph) -> PassResult:
        """Rewrite ``graph``; the result counts the Constant operations replaced."""
        replaced = 0
        for op in [op for op in graph.operations.values() if op.type == 'Constant']:
            try:
                value = build_kernel(op, torch.device('cpu'))()
            except UnsupportedOperationError:
                continue
            (output, ) = op.outputs
            graph.remove_operation(op)
            output.value, output.is_parameter = value, True
            replaced += 1
        return PassResult.counted(graph, replaced)
