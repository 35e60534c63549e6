"""truncate_on_var: cut a graph at a variable, removing everything computed from it."""
from ..graph import BaseGraph
from ..variable import Variable

__all__ = ['truncate_on_var']


def truncate_on_var(graph: BaseGraph, var: Variable, mark_as_output: bool = True) -> int:
    """Remove every operation that reads ``var`` or reads what such an operation computes.

    Their outputs go too (and leave the graph outputs), as do parameters nothing reads
    any more; ``var`` and the operations it does not depend on stay.

    Args:
        graph: the graph, changed in place.
        var: a variable of the graph.
        mark_as_output: make ``var`` a graph output.

    Returns:
        How many operations and variables were removed.

    Example:
        >>> from razorlib.ir import BaseGraph
        >>> graph = BaseGraph()
        >>> x = graph.create_variable('x')
        >>> for op_type in ('Conv', 'Relu', 'Flatten'):
        ...     x = graph.create_operation(op_type, op_type.lower(), inputs=[x],
        ...                                outputs=[graph.create_variable()]).outputs[0]
        >>> graph.mark_variable_as_graph_output(x)
        >>> truncate_on_var(graph, graph.operations['conv'].outputs[0])
        4
        >>> list(graph.operations), list(graph.outputs)
        (['conv'], ['var_0'])
    """
    if graph.variables.get(var.name) is not var:
        raise ValueError(f'variable {var.name!r} is not in graph {graph.name!r}')
    doomed, frontier = {}, list(var.dest_ops)
    while frontier:
        op = frontier.pop()
        if op.name not in doomed:
            doomed[op.name] = op
            frontier.extend(dest for out in op.outputs for dest in out.dest_ops)
    before = len(graph.operations) + len(graph.variables)
    outputs = [out for op in doomed.values() for out in op.outputs]
    for op in doomed.values():
        graph.remove_operation(op)
    for out in outputs:
        graph.remove_variable(out)
    if mark_as_output:
        graph.mark_variable_as_graph_output(var)
    return before - len(graph.operations) - len(graph.variables)
