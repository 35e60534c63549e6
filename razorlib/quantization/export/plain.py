"""Plain FP32 ONNX export of a (possibly quantized and baked) graph."""
import os
from typing import Union

import onnx

from ...ir import BaseGraph, to_onnx
from ..state import dequantize_graph

__all__ = ['export_onnx']


def export_onnx(graph: BaseGraph, path: Union[str, os.PathLike, None] = None) -> onnx.ModelProto:
    """The graph as a plain FP32 ONNX model: baked parameters get their fp32 values back.

    Args:
        graph: any graph; it is left as it is (the export works on a copy).
        path: where to save the model; nothing is saved when None.

    Returns:
        The ONNX model.

    Example:
        >>> import torch
        >>> from razorlib.ir import BaseGraph
        >>> graph = BaseGraph('g')
        >>> x = graph.create_variable('x', shape=(2,), dtype=torch.float32)
        >>> graph.mark_variable_as_graph_input(x)
        >>> y = graph.create_variable('y', shape=(2,), dtype=torch.float32)
        >>> _ = graph.create_operation('Relu', 'relu', inputs=[x], outputs=[y])
        >>> graph.mark_variable_as_graph_output(y)
        >>> [node.op_type for node in export_onnx(graph).graph.node]
        ['Relu']
    """
    work = graph.copy()
    dequantize_graph(work)
    return to_onnx(work, path)
