"""GraphFormatter: the passes that tidy a graph without changing what it computes."""
from ..graph import BaseGraph
from .common import graph_method
from .dead_code import delete_isolated
from .format_constant import format_constant
from .format_parameter import format_parameter
from .truncate import truncate_on_var

__all__ = ['GraphFormatter']


class GraphFormatter:
    """Tidying passes on one graph; each changes it in place and returns how much changed.

    ``truncate_on_var(var, mark_as_output=True)`` cuts the graph at ``var``;
    ``delete_isolated()`` removes what no output needs; ``format_parameter()`` gives each
    reader of a shared parameter its own copy; ``format_constant()`` turns Constant
    operations into parameters.  See the functions of the same names in
    :mod:`razorlib.ir.passes`.

    Args:
        graph: the graph to work on.

    Example:
        >>> import torch
        >>> from razorlib.ir import BaseGraph
        >>> graph = BaseGraph()
        >>> w = graph.create_variable('w', torch.ones(3), is_parameter=True)
        >>> a = graph.create_operation('Mul', 'a', inputs=[graph.create_variable('x'), w],
        ...                            outputs=[graph.create_variable('y')])
        >>> b = graph.create_operation('Mul', 'b', inputs=[a.outputs[0], w],
        ...                            outputs=[graph.create_variable('z')])
        >>> graph.mark_variable_as_graph_output(b.outputs[0])
        >>> formatter = GraphFormatter(graph)
        >>> formatter.format_parameter(), b.inputs[1].name
        (1, 'w_1')
        >>> formatter.truncate_on_var(a.outputs[0]), list(graph.outputs)
        (3, ['y'])
    """

    def __init__(self, graph: BaseGraph) -> None:
        self.graph = graph

    truncate_on_var = graph_method(truncate_on_var)
    delete_isolated = graph_method(delete_isolated)
    format_parameter = graph_method(format_parameter)
    format_constant = graph_method(format_constant)
