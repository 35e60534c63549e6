"""Helpers the passes share: reading constants, checking and replacing matched operations."""
import logging
from typing import Any, Callable, Collection, Dict, Iterable, List, Optional, Sequence, Tuple

import torch

from ..graph import BaseGraph
from ..operation import DEFAULT_OPSET, Operation, Opset
from ..search import OpExpr, SearchableGraph
from ..variable import EMPTY_NAME, Variable

__all__ = ['constant_value', 'default_opset_version', 'fits_opset', 'fresh_name', 'has_input',
           'is_sealed', 'new_parameter', 'other_input', 'rank_of', 'replace_with_operation',
           'rewrite_matches', 'scalar_value', 'sole_consumer', 'within_rank', 'writable_parameter']


logger = logging.getLogger(__name__)


def fresh_name(taken: Collection[str], base: str) -> str:
    """``base``, or ``base_1``, ``base_2``, ... whichever is first not in ``taken``."""
    name, counter = base, 0
    while name in taken:
        counter += 1
        name = f'{base}_{counter}'
    return name


def constant_value(graph: BaseGraph, var: Optional[Variable]) -> Optional[torch.Tensor]:
    """The value of a parameter that no operation produces, else (or for None) None.

    A graph input is no constant even when it holds a value: that value is a default (an
    ONNX initializer listed among the graph inputs) which a fed tensor replaces, so a
    fusion that folded it would ignore the feed.
    """
    if (var is not None and var.is_parameter and var.source_op is None and var.value is not None
            and var.name not in graph.inputs):
        return var.value
    return None


def rank_of(var: Variable) -> Optional[int]:
    """How many dims ``var`` has; None when its shape is unknown."""
    return None if var.shape is None else len(var.shape)


def within_rank(value: torch.Tensor, rank: Optional[int]) -> bool:
    """Whether ``value`` has at most ``rank`` dims (0 when ``rank`` is None, unknown).

    Broadcasting gives the operand of fewer dims leading ones, so a constant of more dims
    than the tensor it meets widens the result to its rank, even a one-element one; a
    fusion that drops or folds such a constant would change the output's shape.
    """
    return value.dim() <= (0 if rank is None else rank)


def scalar_value(graph: BaseGraph, var: Optional[Variable],
                 rank: Optional[int]) -> Optional[float]:
    """The number a one-element floating-point constant (:func:`constant_value`) holds, if
    it meets a tensor of ``rank`` dims (None: unknown) without widening it
    (:func:`within_rank`), else (or for None) None."""
    value = constant_value(graph, var)
    if (value is None or value.numel() != 1 or not value.is_floating_point()
            or not within_rank(value, rank)):
        return None
    return value.item()


def default_opset_version(graph: BaseGraph) -> int:
    """The default-domain opset ``graph`` is exported at: the highest version its operations
    of that domain carry (:data:`DEFAULT_OPSET`'s when none), as in :func:`~razorlib.ir.to_onnx`.
    """
    return max((op.opset.version for op in graph.operations.values()
                if op.opset.domain == DEFAULT_OPSET.domain), default=DEFAULT_OPSET.version)


def fits_opset(graph: BaseGraph, op_type: str, version: int, anchor: Operation,
               pass_name: str) -> bool:
    """Whether a fusion at ``anchor`` may add an ``op_type`` of opset ``version`` to ``graph``.

    Not when ``version`` is newer than the graph's (:func:`default_opset_version`): ONNX
    imports a domain at one version, so exporting the new operation would have runtimes
    read every older operation by the newer opset, where some mean something else (Softmax
    before 13 normalizes a 2-D flattening; ReduceMean takes its axes as an input from 18).
    Such a fusion is skipped, logged at info.
    """
    current = default_opset_version(graph)
    if version <= current:
        return True
    logger.info('%s: %r not fused into %s, which needs opset %d: the graph is at opset %d, '
                'whose other operations opset %d would redefine', pass_name, anchor.name,
                op_type, version, current, version)
    return False


def has_input(op: Operation, index: int) -> bool:
    """Whether ``op`` has input ``index`` and it is not the empty (absent) input."""
    return index < op.num_of_input and op.inputs[index].name != EMPTY_NAME


def other_input(op: Operation, var: Variable) -> Optional[Variable]:
    """The other input of a two-input operation that reads ``var`` once, else None."""
    if op.num_of_input != 2 or op.inputs.count(var) != 1:
        return None
    return op.inputs[1 - op.inputs.index(var)]


def sole_consumer(graph: BaseGraph, var: Variable) -> Optional[Operation]:
    """The one operation reading ``var`` (once), if it is not a graph output, else None."""
    if len(var.dest_ops) != 1 or var.name in graph.outputs:
        return None
    return var.dest_ops[0]


def is_sealed(graph: BaseGraph, ops: Sequence[Operation], entries: Iterable[Variable],
              output: Variable) -> bool:
    """Whether one operation reading ``entries`` and writing ``output`` can replace ``ops``.

    ``output`` must be written by one of ``ops``; every other output of ``ops`` must be
    read only inside ``ops`` and be no graph output; ``ops`` may read only ``entries``,
    one another's outputs, constants and the empty input.
    """
    members, entries = set(ops), set(entries)
    inner = {var for op in ops for var in op.outputs} - {output}
    if output.source_op not in members:
        return False
    for var in inner:
        if var.name in graph.outputs or any(dest not in members for dest in var.dest_ops):
            return False
    return all(var in inner or var in entries or var.name == EMPTY_NAME
               or constant_value(graph, var) is not None for op in ops for var in op.inputs)


def new_parameter(graph: BaseGraph, base: str, value: torch.Tensor) -> Variable:
    """A new parameter variable holding ``value``, named ``base`` or a fresh variant of it."""
    return graph.create_variable(fresh_name(graph.variables, base), value, is_parameter=True)


def writable_parameter(graph: BaseGraph, var: Variable, value: torch.Tensor,
                       readers: Collection[Operation]) -> Variable:
    """A parameter holding ``value`` in place of ``var``, for ``readers`` to read.

    ``var`` itself gets the (new) tensor when only ``readers`` read it and it is no graph
    input or output; otherwise a new parameter named after it is created, so that other
    readers keep the old value.
    """
    private = (all(op in readers for op in var.dest_ops)
               and var.name not in graph.inputs and var.name not in graph.outputs)
    if private:
        var.value = value
        return var
    return new_parameter(graph, var.name, value)


def replace_with_operation(graph: BaseGraph, ops: Sequence[Operation], op_type: str,
                           inputs: Sequence[Variable], output: Variable,
                           attributes: Optional[Dict[str, Any]] = None,
                           opset: Opset = DEFAULT_OPSET,
                           name: Optional[str] = None) -> Operation:
    """Put one new operation in place of ``ops``, which :func:`is_sealed` accepts.

    ``ops`` and their variables that end up unused go; parameters among ``inputs`` stay.
    The new operation writes ``output``, so its consumers and graph-output place remain.

    Args:
        graph: the graph.
        ops: the operations to replace.
        op_type: the new operation's type.
        inputs: the variables it reads, in order; all in the graph.
        output: the variable it writes, written now by one of ``ops``.
        attributes: its attributes.
        opset: its opset.
        name: its name; the name of ``ops[0]`` when None.

    Returns:
        The new operation.
    """
    touched = list(dict.fromkeys(var for op in ops for var in (*op.inputs, *op.outputs)))
    for op in ops:
        graph.remove_operation(op)
    for var in dict.fromkeys(inputs):
        if graph.variables.get(var.name) is not var:  # a parameter removed with its readers
            graph.append_variable(var)
    fused = graph.create_operation(op_type, ops[0].name if name is None else name, attributes,
                                   inputs=inputs, outputs=[output], opset=opset)
    for var in touched:
        if (graph.variables.get(var.name) is var and var.source_op is None and not var.dest_ops
                and var.name not in graph.inputs and var.name not in graph.outputs):
            graph.remove_variable(var)
    return fused


Rewrite = Callable[[BaseGraph, List[Operation]], bool]


def rewrite_matches(graph: BaseGraph, patterns: Sequence[OpExpr],
                    edges: Sequence[Tuple[int, int]], rewrite: Rewrite, name: str,
                    exclusive: bool = True) -> int:
    """Call ``rewrite(graph, match)`` on each match whose operations are all still there.

    Args:
        graph: the graph.
        patterns: see :meth:`SearchableGraph.pattern_matching`.
        edges: see :meth:`SearchableGraph.pattern_matching`.
        rewrite: rewrites one match, or leaves the graph as it is and returns False.
        name: the pattern's name in error messages.
        exclusive: see :meth:`SearchableGraph.pattern_matching`.

    Returns:
        How many matches were rewritten.
    """
    matches = SearchableGraph(graph).pattern_matching(patterns, edges, exclusive, name)
    rewritten = 0
    for match in matches:
        if all(graph.operations.get(op.name) is op for op in match):
            rewritten += bool(rewrite(graph, match))
    return rewritten
