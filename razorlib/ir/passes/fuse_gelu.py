"""FuseGelu: turn the exact GELU written with Erf into one Gelu operation."""
import math
from typing import List, Optional, Tuple

from ...registry import GRAPH_PASSES
from ..graph import BaseGraph
from ..operation import Operation, Opset
from ..variable import Variable
from .base import GraphPass, PassResult
from .common import (fits_opset, is_sealed, other_input, rank_of, replace_with_operation,
                     rewrite_matches, scalar_value, sole_consumer)

__all__ = ['FuseGelu']

_GELU_OPSET = 20
_SCALINGS = {'Div': math.sqrt(2.0), 'Mul': math.sqrt(0.5)}
"""How the input is scaled before Erf: divided by sqrt(2) or multiplied by sqrt(1/2)."""


def _is(value: Optional[float], expected: float) -> bool:
    return value is not None and math.isclose(value, expected, rel_tol=1e-6)


@GRAPH_PASSES.register_module(name=['FuseGelu', 'fuse_gelu'])
class FuseGelu(GraphPass):
    """Replace ``x * 0.5 * (1 + erf(x / sqrt(2)))`` by ``Gelu(x)`` (opset 20).

    The chain Div(x, sqrt 2) (or Mul by sqrt 1/2), Erf, Add(1), Mul is matched; the two
    remaining factors may come in any of the orders exporters produce:
    ``Mul(Mul(x, erf_term), 0.5)``, ``Mul(Mul(x, 0.5), erf_term)`` or
    ``Mul(Mul(erf_term, 0.5), x)``.  Constants are compared with a relative tolerance of
    1e-6, and nothing outside may read the intermediate results.  A graph before opset 20
    is left as it is (:func:`~razorlib.ir.passes.common.fits_opset`), logged at info.

    ``changes`` counts the Gelus made.

    Example:
        >>> import torch
        >>> from razorlib.ir import BaseGraph
        >>> graph = BaseGraph()
        >>> x = graph.create_variable('x')
        >>> def constant(value):
        ...     return graph.create_variable(value=torch.tensor(value), is_parameter=True)
        >>> def op(op_type, *inputs):
        ...     return graph.create_operation(op_type, inputs=list(inputs), opset=20,
        ...                                   outputs=[graph.create_variable()]).outputs[0]
        >>> half = op('Mul', x, constant(0.5))
        >>> erf_term = op('Add', op('Erf', op('Div', x, constant(2 ** 0.5))), constant(1.0))
        >>> y = op('Mul', half, erf_term)
        >>> FuseGelu()(graph).changes
        1
        >>> [(op.type, op.outputs[0] is y) for op in graph.operations.values()]
        [('Gelu', True)]
    """

    def call(self, graph: BaseGraph) -> PassResult:
        """Rewrite ``graph``; the result counts the Gelus made."""
        fused = rewrite_matches(graph, [set(_SCALINGS), 'Erf', 'Add', 'Mul'],
                                [(0, 1), (1, 2), (2, 3)], _fuse, name='fuse_gelu',
                                exclusive=False)
        return PassResult.counted(graph, fused)


def _fuse(graph: BaseGraph, match: List[Operation]) -> bool:
    scaling, erf, add, mul = match
    x = _scaled_input(graph, scaling)
    one = other_input(add, erf.outputs[0])
    if x is None or not _is(scalar_value(graph, one, rank_of(x)), 1.0):
        return False
    found = _remaining_factors(graph, x, mul, add.outputs[0])
    if found is None:
        return False
    extra, output = found
    ops = [*match, *extra]
    if not is_sealed(graph, ops, [x], output) or \
            not fits_opset(graph, 'Gelu', _GELU_OPSET, scaling, 'fuse_gelu'):
        return False
    replace_with_operation(graph, ops, 'Gelu', [x], output,
                           opset=Opset(max(_GELU_OPSET, scaling.opset.version)))
    return True


def _scaled_input(graph: BaseGraph, scaling: Operation) -> Optional[Variable]:
    """``x`` of ``x / sqrt(2)`` or ``x * sqrt(1/2)`` (either operand order for Mul)."""
    if scaling.num_of_input != 2:
        return None
    orders = [scaling.inputs] if scaling.type == 'Div' else [scaling.inputs,
                                                             scaling.inputs[::-1]]
    for data, factor in orders:
        rank = rank_of(data)
        if (_is(scalar_value(graph, factor, rank), _SCALINGS[scaling.type])
                and scalar_value(graph, data, rank) is None):
            return data
    return None


def _remaining_factors(graph: BaseGraph, x: Variable, mul: Operation,
                       erf_term: Variable) -> Optional[Tuple[List[Operation], Variable]]:
    """What else multiplies ``erf_term`` by ``x`` and 0.5, and the GELU's output.

    Either ``mul`` reads ``Mul(x, 0.5)``, or the one Mul after ``mul`` supplies the factor
    ``mul`` lacks; returns that operation and the output, or None.
    """
    other, rank = other_input(mul, erf_term), rank_of(x)
    if other is None:
        return None
    half = other.source_op
    if (half is not None and half.type == 'Mul'
            and _is(scalar_value(graph, other_input(half, x), rank), 0.5)):
        return [half], mul.outputs[0]
    tail = sole_consumer(graph, mul.outputs[0])
    if tail is None or tail.type != 'Mul':
        return None
    last = other_input(tail, mul.outputs[0])
    if (other is x and _is(scalar_value(graph, last, rank), 0.5)) or \
            (_is(scalar_value(graph, other, rank), 0.5) and last is x):
        return [tail], tail.outputs[0]
    return None
