"""fuse_skiplayernorm: turn Add + LayerNormalization into onnxruntime's SkipLayerNormalization."""
from typing import List

from ..graph import BaseGraph
from ..operation import Operation, Opset
from ..variable import Dim, Variable
from .common import constant_value, has_input, replace_with_operation, rewrite_matches

__all__ = ['SKIP_LAYER_NORM_OPSET', 'fuse_skiplayernorm']

SKIP_LAYER_NORM_OPSET = Opset(1, 'com.microsoft')
"""SkipLayerNormalization is a contrib operator of onnxruntime, not of the ONNX standard."""


def fuse_skiplayernorm(graph: BaseGraph) -> int:
    """Replace ``LayerNormalization(a + b, gamma, beta)`` by ``SkipLayerNormalization``.

    The fused operator (domain ``com.microsoft``) runs in onnxruntime, not in the
    :class:`~razorlib.ir.executor.TorchExecutor`.  It normalizes the last axis of 3-D
    inputs, so: ``a`` and ``b`` are activations of the same known 3-D shape, the
    LayerNormalization has ``axis = -1`` (or 2), one output, and a constant 1-D ``gamma``
    (and ``beta``, if any); the Add feeds only the LayerNormalization.

    Args:
        graph: the graph, changed in place.

    Returns:
        How many SkipLayerNormalizations were made.

    Example:
        >>> import torch
        >>> from razorlib.ir import BaseGraph
        >>> graph = BaseGraph()
        >>> a, b = (graph.create_variable(name, shape=(1, 4, 8)) for name in 'ab')
        >>> add = graph.create_operation('Add', 'add', inputs=[a, b],
        ...                              outputs=[graph.create_variable('sum')])
        >>> gamma = graph.create_variable('gamma', torch.ones(8), is_parameter=True)
        >>> ln = graph.create_operation('LayerNormalization', 'ln', {'epsilon': 1e-5},
        ...                             inputs=[add.outputs[0], gamma],
        ...                             outputs=[graph.create_variable('y')], opset=17)
        >>> fuse_skiplayernorm(graph), graph.operations['ln'].opset.domain
        (1, 'com.microsoft')
    """
    return rewrite_matches(graph, ['Add', 'LayerNormalization'], [(0, 1)], _fuse,
                           name='fuse_skiplayernorm')


def _fuse(graph: BaseGraph, match: List[Operation]) -> bool:
    add, norm = match
    shape = add.inputs[0].shape
    affine = [norm.inputs[index] for index in (1, 2) if has_input(norm, index)]
    if not (shape is not None and len(shape) == 3 and None not in shape
            and all(var.shape == shape and constant_value(var) is None for var in add.inputs)
            and norm.attributes.get('axis', -1) in (-1, 2) and norm.num_of_output == 1
            and has_input(norm, 1) and all(_is_vector(var, shape[2]) for var in affine)):
        return False
    replace_with_operation(graph, match, 'SkipLayerNormalization', [*add.inputs, *affine],
                           norm.outputs[0], {'epsilon': norm.attributes.get('epsilon', 1e-5)},
                           SKIP_LAYER_NORM_OPSET, norm.name)
    return True


def _is_vector(var: Variable, size: Dim) -> bool:
    """A constant 1-D tensor, of ``size`` values when that is known."""
    value = constant_value(var)
    return value is not None and value.dim() == 1 and (
        not isinstance(size, int) or value.shape[0] == size)
