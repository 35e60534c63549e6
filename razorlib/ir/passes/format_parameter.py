"""FormatParameter: give every operation reading a shared parameter its own copy."""
from ...registry import GRAPH_PASSES
from ..graph import BaseGraph
from ..variable import Variable
from .base import GraphPass, PassResult
from .common import constant_value, new_parameter

__all__ = ['FormatParameter', 'split_shared_parameter']


@GRAPH_PASSES.register_module(name=['FormatParameter', 'format_parameter'])
class FormatParameter(GraphPass):
    """Split each parameter that several operations read into one copy per operation.

    The first reader keeps the original; each other one reads a clone (named after the
    original), in every input slot where it read the original.  Afterwards a pass may
    change one operation's parameter without touching the others.  Parameters that are
    graph inputs or outputs stay shared.

    ``changes`` counts the copies made.

    Example:
        >>> import torch
        >>> from razorlib.ir import BaseGraph
        >>> graph = BaseGraph()
        >>> w = graph.create_variable('w', torch.ones(3), is_parameter=True)
        >>> for name in ('a', 'b'):
        ...     op = graph.create_operation('Mul', name, inputs=[graph.create_variable(), w])
        >>> FormatParameter()(graph).changes
        1
        >>> [op.inputs[1].name for op in graph.operations.values()]
        ['w', 'w_1']
    """

    def call(self, graph: BaseGraph) -> PassResult:
        """Rewrite ``graph``; the result counts the copies made."""
        copies = sum(split_shared_parameter(graph, var) for var in list(graph.variables.values()))
        return PassResult.counted(graph, copies)


def split_shared_parameter(graph: BaseGraph, var: Variable) -> int:
    """Give every operation reading the constant parameter ``var``, but the first, a copy
    of its own (in every input slot where it read ``var``); how many copies were made.

    A parameter that is no constant (a graph input with a default value, produced by an
    operation), or a graph output, stays shared: 0.
    """
    readers = list(dict.fromkeys(var.dest_ops))
    # constant_value is None for a graph input too: its value is a default
    if constant_value(graph, var) is None or len(readers) < 2 or var.name in graph.outputs:
        return 0
    for op in readers[1:]:
        copy = new_parameter(graph, var.name, var.value.clone())
        for index, read in enumerate(op.inputs):
            if read is var:
                graph.replace_input(op, index, copy)
    return len(readers) - 1
