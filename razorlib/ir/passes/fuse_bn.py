"""FuseBatchNorm: fold an inference BatchNormalization into the linear op before it."""
from typing import List

import torch

from ...registry import GRAPH_PASSES
from ..graph import BaseGraph
from ..operation import Operation
from .base import GraphPass, PassResult
from .common import constant_value, rewrite_matches
from .linear_ops import LINEAR_TYPES, fold_into_linear, linear_view

__all__ = ['FuseBatchNorm']


@GRAPH_PASSES.register_module(name=['FuseBatchNorm', 'fuse_bn'])
class FuseBatchNorm(GraphPass):
    """Fold each BatchNormalization into the linear operation that alone feeds it.

    With ``scale = gamma / sqrt(var + epsilon)`` per output channel, the weight is scaled
    along its output-channel axis (axis 0 of a Conv weight, axis 1 of a ConvTranspose
    weight within each group, by ``transB`` for a Gemm, the columns of a MatMul weight)
    and the bias becomes ``(bias - mean) * scale + beta`` (created when missing).  A
    MatMul becomes a Gemm to hold the bias.  Only a BatchNormalization in inference mode
    with constant statistics qualifies, fed by a linear operation with constant weights
    whose output nothing else reads; a MatMul also needs a data input known to be 2-D.

    ``changes`` counts the BatchNormalizations folded.

    Example:
        >>> import torch
        >>> from razorlib.ir import BaseGraph
        >>> graph = BaseGraph()
        >>> x = graph.create_variable('x', shape=(1, 3, 4, 4))
        >>> graph.mark_variable_as_graph_input(x)
        >>> w = graph.create_variable('w', torch.randn(2, 3, 1, 1), is_parameter=True)
        >>> conv = graph.create_operation('Conv', 'conv', inputs=[x, w],
        ...                               outputs=[graph.create_variable('y')])
        >>> stats = [graph.create_variable(name, torch.rand(2) + 0.5, is_parameter=True)
        ...          for name in ('gamma', 'beta', 'mean', 'var')]
        >>> bn = graph.create_operation('BatchNormalization', 'bn',
        ...                             inputs=[conv.outputs[0], *stats],
        ...                             outputs=[graph.create_variable('z')])
        >>> graph.mark_variable_as_graph_output(bn.outputs[0])
        >>> FuseBatchNorm()(graph).changes, [(op.name, op.type) for op in graph.operations.values()]
        (1, [('conv', 'Conv')])
        >>> [var.name for var in graph.operations['conv'].inputs], list(graph.outputs)
        (['x', 'w', 'conv.bias'], ['z'])
    """

    def call(self, graph: BaseGraph) -> PassResult:
        """Rewrite ``graph``; the result counts the BatchNormalizations folded."""
        folded = rewrite_matches(graph, [set(LINEAR_TYPES), 'BatchNormalization'], [(0, 1)],
                                 _fold, name='fuse_bn')
        return PassResult.counted(graph, folded)


def _fold(graph: BaseGraph, match: List[Operation]) -> bool:
    linear, bn = match
    view = linear_view(graph, linear)
    if view is None or bn.num_of_input != 5 or bn.num_of_output != 1 \
            or bn.attributes.get('training_mode', 0):
        return False
    statistics = [constant_value(graph, var) for var in bn.inputs[1:]]
    if any(value is None or value.shape != (view.channels, ) for value in statistics):
        return False
    gamma, beta, mean, var = (value.double() for value in statistics)
    scale = gamma / torch.sqrt(var + bn.attributes.get('epsilon', 1e-5))
    weight = view.weight.double() * view.multiplier(scale)
    bias = (view.bias.double() - mean) * scale + beta
    fold_into_linear(graph, view, bn, weight, bias)
    return True
