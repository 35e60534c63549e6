"""DeleteIsolated: remove the operations and variables no graph output depends on."""
from ...registry import GRAPH_PASSES
from ..graph import BaseGraph
from .base import GraphPass, PassResult

__all__ = ['DeleteIsolated']


@GRAPH_PASSES.register_module(name=['DeleteIsolated', 'delete_isolated'])
class DeleteIsolated(GraphPass):
    """Remove what no graph output needs.

    Operations whose outputs no graph output depends on go, with the parameters only
    they read; then every variable that nothing produces or reads and that is no graph
    input or output goes.  A graph without outputs loses all its operations.

    ``changes`` counts the operations and variables removed.

    Example:
        >>> from razorlib.ir import BaseGraph
        >>> graph = BaseGraph()
        >>> x = graph.create_variable('x')
        >>> graph.mark_variable_as_graph_input(x)
        >>> relu = graph.create_operation('Relu', 'relu', inputs=[x],
        ...                               outputs=[graph.create_variable('y')])
        >>> unused = graph.create_operation('Neg', 'unused', inputs=[x],
        ...                                 outputs=[graph.create_variable('dead')])
        >>> loose = graph.create_variable('loose')
        >>> graph.mark_variable_as_graph_output(relu.outputs[0])
        >>> DeleteIsolated()(graph).changes, list(graph.operations), list(graph.variables)
        (3, ['relu'], ['x', 'y'])
    """

    def call(self, graph: BaseGraph) -> PassResult:
        """Rewrite ``graph``; the result counts the operations and variables removed."""
        needed, frontier = set(), [var.source_op for var in graph.outputs.values()]
        while frontier:
            op = frontier.pop()
            if op is not None and op not in needed:
                needed.add(op)
                frontier.extend(var.source_op for var in op.inputs)
        before = len(graph.operations) + len(graph.variables)
        for op in [op for op in graph.operations.values() if op not in needed]:
            graph.remove_operation(op)
        for var in list(graph.variables.values()):
            if (var.source_op is None and not var.dest_ops and var.name not in graph.inputs
                    and var.name not in graph.outputs):
                graph.remove_variable(var)
        removed = before - len(graph.operations) - len(graph.variables)
        return PassResult.counted(graph, removed)
