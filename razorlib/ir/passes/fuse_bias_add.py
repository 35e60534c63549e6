"""FuseBiasAdd: fold an Add of a per-channel constant into the Conv or Gemm before it."""
from typing import List

from ...registry import GRAPH_PASSES
from ..graph import BaseGraph
from ..operation import Operation
from .base import GraphPass, PassResult
from .common import constant_value, other_input, rewrite_matches
from .linear_ops import fold_into_linear, linear_view

__all__ = ['FuseBiasAdd']

_BIASED_TYPES = frozenset({'Conv', 'ConvTranspose', 'Gemm'})


@GRAPH_PASSES.register_module(name=['FuseBiasAdd', 'fuse_bias_add'])
class FuseBiasAdd(GraphPass):
    """Fold ``Add(linear(x), c)`` into the linear operation's bias.

    ``c`` must be a constant holding one value per output channel (or one value), shaped
    so that it does not widen the output, e.g. ``(C, 1, 1)`` after a 2-D Conv or ``(N,)``
    after a Gemm.  The linear operation (Conv, ConvTranspose or Gemm with constant weights)
    must feed only the Add; its bias, if any, gets ``c`` added (``beta * C + c`` with
    ``beta = 1`` for a Gemm), else ``c`` becomes its bias.

    ``changes`` counts the Adds folded.

    Example:
        >>> import torch
        >>> from razorlib.ir import BaseGraph
        >>> graph = BaseGraph()
        >>> x = graph.create_variable('x', shape=(2, 3))
        >>> graph.mark_variable_as_graph_input(x)
        >>> w = graph.create_variable('w', torch.randn(4, 3), is_parameter=True)
        >>> fc = graph.create_operation('Gemm', 'fc', {'transB': 1}, inputs=[x, w],
        ...                             outputs=[graph.create_variable('y')])
        >>> c = graph.create_variable('c', torch.ones(1, 4), is_parameter=True)
        >>> add = graph.create_operation('Add', 'add', inputs=[fc.outputs[0], c],
        ...                              outputs=[graph.create_variable('z')])
        >>> FuseBiasAdd()(graph).changes, graph.operations['fc'].inputs[2].value.tolist()
        (1, [1.0, 1.0, 1.0, 1.0])
    """

    def call(self, graph: BaseGraph) -> PassResult:
        """Rewrite ``graph``; the result counts the Adds folded."""
        folded = rewrite_matches(graph, [_BIASED_TYPES, 'Add'], [(0, 1)], _fold,
                                 name='fuse_bias_add')
        return PassResult.counted(graph, folded)


def _fold(graph: BaseGraph, match: List[Operation]) -> bool:
    linear, add = match
    view = linear_view(graph, linear)
    addend = other_input(add, linear.outputs[0])
    value = None if view is None or addend is None else constant_value(graph, addend)
    vector = None if value is None else view.channel_vector(value)
    if vector is None:
        return False
    fold_into_linear(graph, view, add, None, view.bias + vector)
    return True
