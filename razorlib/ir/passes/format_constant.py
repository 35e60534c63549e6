"""format_constant: replace Constant operations by parameters holding their values."""
import torch

from ..executor import UnsupportedOperationError, build_kernel
from ..graph import BaseGraph

__all__ = ['format_constant']


def format_constant(graph: BaseGraph) -> int:
    """Remove each Constant operation; its output becomes a parameter holding the value.

    The value is what the executor's Constant kernel computes; constants it cannot hold
    (strings, sparse tensors) stay as they are.

    Args:
        graph: the graph, changed in place.

    Returns:
        How many Constant operations were replaced.

    Example:
        >>> from razorlib.ir import BaseGraph
        >>> graph = BaseGraph()
        >>> two = graph.create_variable('two')
        >>> constant = graph.create_operation('Constant', 'c', {'value_float': 2.0},
        ...                                   outputs=[two])
        >>> mul = graph.create_operation('Mul', 'mul', inputs=[graph.create_variable('x'), two])
        >>> format_constant(graph), list(graph.operations), two.is_parameter, two.value
        (1, ['mul'], True, tensor(2.))
    """
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
    return replaced
