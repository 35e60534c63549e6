"""format_parameter: give every operation reading a shared parameter its own copy."""
from ..graph import BaseGraph
from .common import constant_value, new_parameter

__all__ = ['format_parameter']


def format_parameter(graph: BaseGraph) -> int:
    """Split each parameter that several operations read into one copy per operation.

    The first reader keeps the original; each other one reads a clone (named after the
    original), in every input slot where it read the original.  Afterwards a pass may
    change one operation's parameter without touching the others.  Parameters that are
    graph inputs or outputs stay shared.

    Args:
        graph: the graph, changed in place.

    Returns:
        How many copies were made.

    Example:
        >>> import torch
        >>> from razorlib.ir import BaseGraph
        >>> graph = BaseGraph()
        >>> w = graph.create_variable('w', torch.ones(3), is_parameter=True)
        >>> for name in ('a', 'b'):
        ...     op = graph.create_operation('Mul', name, inputs=[graph.create_variable(), w])
        >>> format_parameter(graph), [op.inputs[1].name for op in graph.operations.values()]
        (1, ['w', 'w_1'])
    """
    copies = 0
    for var in list(graph.variables.values()):
        readers = list(dict.fromkeys(var.dest_ops))
        if (constant_value(var) is None or len(readers) < 2 or var.name in graph.inputs
                or var.name in graph.outputs):
            continue
        for op in readers[1:]:
            copy = new_parameter(graph, var.name, var.value.clone())
            for index, read in enumerate(op.inputs):
                if read is var:
                    graph.replace_input(op, index, copy)
            copies += 1
    return copies
