"""The invariants of a graph, and the error that lists the ones a graph breaks.

A coherent graph has:

- dict keys equal to the names of the operations and variables stored under them;
- operations whose inputs and outputs are variables of the graph, each output produced once;
- variables whose ``source_op`` and ``dest_ops`` are operations of the graph and agree with
  those operations' ``outputs`` and ``inputs`` both ways, counting repeats;
- graph inputs and outputs that are variables of the graph, and graph inputs no operation
  produces.
"""
from collections import Counter
from typing import TYPE_CHECKING, Dict, List, Sequence, Tuple

from .variable import EMPTY_NAME

if TYPE_CHECKING:
    from .graph import BaseGraph
    from .operation import Operation
    from .variable import Variable

__all__ = ['GraphCheckError', 'check_inputs_provided', 'find_graph_problems',
           'find_unprovided_inputs', 'find_unprovided_outputs']


class GraphCheckError(ValueError):
    """A graph breaks one or more of its invariants.

    Args:
        graph_name: the name of the graph at fault.
        problems: one line per broken invariant, naming the operations and variables.

    Example:
        >>> error = GraphCheckError('g', ["graph input 'x' is not a variable of the graph"])
        >>> error.problems
        ["graph input 'x' is not a variable of the graph"]
    """

    def __init__(self, graph_name: str, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        lines = ''.join(f'\n  - {problem}' for problem in self.problems)
        super().__init__(f'graph {graph_name!r} breaks {len(self.problems)} invariant(s):'
                         f'{lines}')


def find_graph_problems(graph: 'BaseGraph') -> List[str]:
    """Every invariant ``graph`` breaks, one readable line each (empty when coherent).

    Args:
        graph: the graph to check.

    Returns:
        The problems found, in a deterministic order.
    """
    return (_key_problems(graph) + _boundary_problems(graph) + _operation_problems(graph)
            + _variable_problems(graph) + _read_count_problems(graph))


def find_unprovided_inputs(graph: 'BaseGraph') -> List[Tuple['Operation', 'Variable']]:
    """The inputs nothing provides: no producer, no value, not a graph input.

    Such a graph is coherent (it may be under construction) but cannot run or be
    exported.  The empty name (an absent optional input) is provided as None.

    Args:
        graph: the graph to inspect.

    Returns:
        ``(operation, variable)`` pairs, in operation and input order.

    Example:
        >>> from razorlib.ir import BaseGraph
        >>> graph = BaseGraph('g')
        >>> x, ghost = graph.create_variable('x'), graph.create_variable('ghost')
        >>> graph.mark_variable_as_graph_input(x)
        >>> add = graph.create_operation('Add', 'add', inputs=[x, ghost])
        >>> [(op.name, var.name) for op, var in find_unprovided_inputs(graph)]
        [('add', 'ghost')]
    """
    return [(op, var) for op in graph.operations.values() for var in dict.fromkeys(op.inputs)
            if var.name != EMPTY_NAME and var.source_op is None and var.value is None
            and var.name not in graph.inputs]


def find_unprovided_outputs(graph: 'BaseGraph') -> List['Variable']:
    """The graph outputs nothing provides: no producer, no value, not a graph input.

    Like an unprovided input (:func:`find_unprovided_inputs`), such an output leaves the
    graph coherent (``remove_operation`` leaves the outputs of the removed operation in
    place) but unable to run or be exported.

    Args:
        graph: the graph to inspect.

    Returns:
        The variables, in graph output order.

    Example:
        >>> from razorlib.ir import BaseGraph
        >>> graph = BaseGraph('g')
        >>> graph.mark_variable_as_graph_output(graph.create_variable('ghost'))
        >>> [var.name for var in find_unprovided_outputs(graph)]
        ['ghost']
    """
    return [var for var in graph.outputs.values()
            if var.source_op is None and var.value is None and var.name not in graph.inputs]


def check_inputs_provided(graph: 'BaseGraph') -> None:
    """Refuse a graph that cannot run: an operation reads, or the graph returns, a variable
    nothing provides (see :func:`find_unprovided_inputs`, :func:`find_unprovided_outputs`).

    Raises:
        ValueError: names each operation and the variable it reads, and each graph output.

    Example:
        >>> from razorlib.ir import BaseGraph
        >>> graph = BaseGraph('g')
        >>> add = graph.create_operation('Add', 'add', inputs=[graph.create_variable('ghost')])
        >>> check_inputs_provided(graph)
        Traceback (most recent call last):
        ...
        ValueError: graph 'g': 'add' reads 'ghost', which no operation produces, has no value...
    """
    unprovided = [f'{op.name!r} reads {var.name!r}' for op, var in find_unprovided_inputs(graph)]
    unprovided += [f'graph output {var.name!r}' for var in find_unprovided_outputs(graph)]
    if unprovided:
        raise ValueError(f'graph {graph.name!r}: {", ".join(unprovided)}, which no operation '
                         'produces, has no value and is not a graph input')


def _key_problems(graph: 'BaseGraph') -> List[str]:
    tables: Tuple[Tuple[str, Dict], ...] = (
        ('operation', graph.operations), ('variable', graph.variables),
        ('graph input', graph.inputs), ('graph output', graph.outputs))
    return [f'{kind} {item.name!r} is stored under the key {key!r}'
            for kind, table in tables for key, item in table.items() if item.name != key]


def _boundary_problems(graph: 'BaseGraph') -> List[str]:
    problems = []
    for kind, table in (('input', graph.inputs), ('output', graph.outputs)):
        problems += [f'graph {kind} {var.name!r} is not a variable of the graph'
                     for var in table.values() if not _has_variable(graph, var)]
    problems += [f'graph input {var.name!r} is produced by operation {var.source_op.name!r}'
                 for var in graph.inputs.values() if var.source_op is not None]
    return problems


def _operation_problems(graph: 'BaseGraph') -> List[str]:
    problems = []
    for op in graph.operations.values():
        for side, variables in (('input', op.inputs), ('output', op.outputs)):
            problems += [f'operation {op.name!r} has {side} {var.name!r}, which is not a '
                         'variable of the graph'
                         for var in variables if not _has_variable(graph, var)]
        for var, count in Counter(op.outputs).items():
            if count > 1:
                problems.append(f'operation {op.name!r} lists output {var.name!r} {count} times')
            if var.source_op is not op:
                source = var.source_op.name if var.source_op is not None else None
                problems.append(f'operation {op.name!r} has output {var.name!r}, whose '
                                f'source_op is {source!r}')
    return problems


def _variable_problems(graph: 'BaseGraph') -> List[str]:
    problems = []
    for var in graph.variables.values():
        source = var.source_op
        if source is not None and not _has_operation(graph, source):
            problems.append(f'variable {var.name!r} has source_op {source.name!r}, which is '
                            'not an operation of the graph')
        elif source is not None and var not in source.outputs:
            problems.append(f'variable {var.name!r} has source_op {source.name!r}, which does '
                            'not list it among its outputs')
        problems += [f'variable {var.name!r} has dest_op {op.name!r}, which is not an '
                     'operation of the graph'
                     for op in dict.fromkeys(var.dest_ops) if not _has_operation(graph, op)]
    return problems


def _read_count_problems(graph: 'BaseGraph') -> List[str]:
    """How often each operation reads each variable, seen from both sides."""
    pairs: List[Tuple['Variable', 'Operation']] = []
    for op in graph.operations.values():
        pairs += [(var, op) for var in dict.fromkeys(op.inputs)]
    for var in graph.variables.values():
        pairs += [(var, op) for op in dict.fromkeys(var.dest_ops)]
    problems = []
    for var, op in dict.fromkeys(pairs):
        reads, listed = op.inputs.count(var), var.dest_ops.count(op)
        if reads != listed:
            problems.append(f'operation {op.name!r} reads variable {var.name!r} {reads} '
                            f'time(s) but the variable lists it in dest_ops {listed} time(s)')
    return problems


def _has_variable(graph: 'BaseGraph', var: 'Variable') -> bool:
    return graph.variables.get(var.name) is var


def _has_operation(graph: 'BaseGraph', op: 'Operation') -> bool:
    return graph.operations.get(op.name) is op
