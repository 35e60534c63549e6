"""FuseLayerNorm: turn a LayerNorm written in primitive ops into LayerNormalization."""
from typing import List, Optional, Sequence, Tuple

import torch

from ...registry import GRAPH_PASSES
from ..graph import BaseGraph
from ..operation import Operation, Opset
from .base import GraphPass, PassResult
from .common import (constant_value, fits_opset, is_sealed, new_parameter, other_input,
                     rank_of, replace_with_operation, rewrite_matches, scalar_value,
                     sole_consumer, within_rank)

__all__ = ['FuseLayerNorm']

_PATTERN = ['ReduceMean', 'Sub', 'Pow', 'ReduceMean', 'Add', 'Sqrt', 'Div']
_LAYER_NORM_OPSET = 17


@GRAPH_PASSES.register_module(name=['FuseLayerNorm', 'fuse_layernorm'])
class FuseLayerNorm(GraphPass):
    """Replace ``(x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps) * scale + bias``.

    The operations ReduceMean, Sub, Pow(2), ReduceMean, Add(eps), Sqrt, Div, and an
    optional Mul by a constant scale then an optional Add of a constant bias, become one
    LayerNormalization (opset 17 or the ReduceMean's, if later).  Both ReduceMeans must
    keep dims and reduce the same trailing axes (``axis`` = the first of them), and
    ``x``'s shape must be known (:meth:`TorchExecutor.tracing_operation_meta` records it)
    down to the normalized dims, which scale and bias take; a scale or bias that varies
    along other axes stays outside.  Nothing outside may read the operations'
    intermediate results.  A graph before opset 17 is left as it is
    (:func:`~razorlib.ir.passes.common.fits_opset`), logged at info.

    ``changes`` counts the LayerNormalizations made.

    Example:
        >>> import onnx
        >>> from onnx import helper, numpy_helper, TensorProto
        >>> from razorlib.ir import from_onnx
        >>> nodes = [helper.make_node('ReduceMean', ['x'], ['mean'], axes=[-1]),
        ...          helper.make_node('Sub', ['x', 'mean'], ['d']),
        ...          helper.make_node('Pow', ['d', 'two'], ['d2']),
        ...          helper.make_node('ReduceMean', ['d2'], ['var'], axes=[-1]),
        ...          helper.make_node('Add', ['var', 'eps'], ['var_eps']),
        ...          helper.make_node('Sqrt', ['var_eps'], ['std']),
        ...          helper.make_node('Div', ['d', 'std'], ['y'])]
        >>> constants = [helper.make_tensor('two', TensorProto.FLOAT, [], [2.0]),
        ...              helper.make_tensor('eps', TensorProto.FLOAT, [], [1e-5])]
        >>> x = helper.make_tensor_value_info('x', TensorProto.FLOAT, ['batch', 8])
        >>> y = helper.make_tensor_value_info('y', TensorProto.FLOAT, ['batch', 8])
        >>> graph = from_onnx(helper.make_model(
        ...     helper.make_graph(nodes, 'ln', [x], [y], constants),
        ...     opset_imports=[helper.make_opsetid('', 17)]))
        >>> FuseLayerNorm()(graph).changes, [op.type for op in graph.operations.values()]
        (1, ['LayerNormalization'])
        >>> [var.name for var in graph.operations['op_0'].inputs]
        ['x', 'op_0.scale']
    """

    def call(self, graph: BaseGraph) -> PassResult:
        """Rewrite ``graph``; the result counts the LayerNormalizations made."""
        fused = rewrite_matches(graph, _PATTERN, [(index, index + 1) for index in range(6)],
                                _fuse, name='fuse_layernorm', exclusive=False)
        return PassResult.counted(graph, fused)


def _fuse(graph: BaseGraph, match: List[Operation]) -> bool:
    mean, sub, pow_, variance, add, sqrt, div = match
    x, rank = mean.inputs[0], rank_of(mean.inputs[0])
    centred, std = sub.outputs[0], sqrt.outputs[0]
    epsilon = scalar_value(graph, other_input(add, variance.outputs[0]), rank)
    if (sub.inputs != [x, mean.outputs[0]] or pow_.inputs[0] is not centred
            or scalar_value(graph, pow_.inputs[1], rank) != 2.0
            or variance.inputs[0] is not pow_.outputs[0]
            or epsilon is None or div.inputs != [centred, std]):
        return False
    axis = None if rank is None else _layer_norm_axis(graph, rank, [mean, variance])
    if axis is None or not all(isinstance(size, int) for size in x.shape[axis:]):
        return False
    normalized = tuple(x.shape[axis:])
    ops, output, affine = list(match), div.outputs[0], {}
    for op_type in ('Mul', 'Add'):
        consumer = sole_consumer(graph, output)
        if consumer is not None and consumer.type == op_type:
            value = _along(constant_value(graph, other_input(consumer, output)), normalized,
                           rank)
            if value is not None:
                ops.append(consumer)
                output, affine[op_type] = consumer.outputs[0], value
    if not is_sealed(graph, ops, [x], output) or not fits_opset(
            graph, 'LayerNormalization', _LAYER_NORM_OPSET, mean, 'fuse_layernorm'):
        return False
    scale = affine.get('Mul', torch.ones(normalized, dtype=x.dtype or torch.float32))
    inputs = [x, new_parameter(graph, f'{mean.name}.scale', scale)]
    if 'Add' in affine:
        inputs.append(new_parameter(graph, f'{mean.name}.bias', affine['Add']))
    replace_with_operation(graph, ops, 'LayerNormalization', inputs, output,
                           {'axis': axis, 'epsilon': epsilon},
                           Opset(max(_LAYER_NORM_OPSET, mean.opset.version)))
    return True


def _axes(graph: BaseGraph, op: Operation) -> Optional[Tuple[int, ...]]:
    """A ReduceMean's axes (attribute before opset 18, input 1 after); None if it has none."""
    if 'axes' in op.attributes:
        return tuple(op.attributes['axes'])
    value = constant_value(graph, op.inputs[1]) if op.num_of_input > 1 else None
    return None if value is None else tuple(value.reshape(-1).tolist())


def _layer_norm_axis(graph: BaseGraph, rank: int,
                     reductions: Sequence[Operation]) -> Optional[int]:
    """The first normalized axis, negative, when both reductions reduce the trailing axes."""
    axes = {_axes(graph, op) for op in reductions}
    if len(axes) != 1 or not all(op.attributes.get('keepdims', 1) for op in reductions):
        return None
    (found, ) = axes
    if not found:
        return None
    negative = sorted(axis - rank if axis >= 0 else axis for axis in found)
    return negative[0] if negative == list(range(-len(negative), 0)) else None


def _along(value: Optional[torch.Tensor], normalized: Tuple[int, ...],
           rank: int) -> Optional[torch.Tensor]:
    """``value`` expanded to the normalized shape, if it varies only along those axes and
    does not widen the input (of ``rank`` dims; :func:`~razorlib.ir.passes.common.within_rank`).
    """
    if value is None or not within_rank(value, rank):
        return None
    extra = value.dim() - len(normalized)
    if extra > 0:
        if any(size != 1 for size in value.shape[:extra]):
            return None
        value = value.reshape(value.shape[extra:])
    try:
        if torch.broadcast_shapes(value.shape, normalized) != normalized:
            return None
    except RuntimeError:
        return None
    return value.expand(normalized).clone()
