"""Plain ONNX export of a (possibly quantized and baked) graph: its FP32 parameters, or
the values its quantized form computes with."""
import os
from typing import Dict, Tuple, Union

import onnx
import torch

from ...ir import BaseGraph, QuantableOperation, to_onnx
from ..functional import fake_quantize
from ..state import check_calibrated, dequantize_graph

__all__ = ['export_onnx', 'write_quantized_parameters']


def write_quantized_parameters(graph: BaseGraph) -> BaseGraph:
    """Give every parameter the value the quantized graph computes with, in place.

    The values a post-training pass set in the quantized graph only (BiasCorrection's
    corrected biases, AdaRound's rounded weights) stay as they are, and a parameter
    quantized at run time (ACTIVATED, or PASSIVE: an integer bias) becomes its
    fake-quantized value, the point of its grid the executor uses; a baked one holds that
    already.  FP32 parameters (TensorRT's biases, a dequantized operation's, those of an
    operation the dispatcher left in FP32) keep the value in use.  The configs are left as
    they are; :func:`export_onnx` calls this on its copy.

    Args:
        graph: a calibrated graph, changed in place (call it on a copy).

    Returns:
        ``graph``, so calls chain.

    Raises:
        ValueError: a parameter read by two operations that quantize it differently, or
            by one that quantizes it and one that computes with its float value (a layer
            reused after a float op, left in FP32): a plain model holds one value per
            initializer.

    Example:
        >>> from razorlib.ir import BaseGraph
        >>> from razorlib.quantization import calibrate, quantize_graph
        >>> graph = BaseGraph()
        >>> graph.mark_variable_as_graph_input(graph.create_variable('x'))
        >>> w = graph.create_variable('w', torch.tensor([[0.333], [-1.27]]), is_parameter=True)
        >>> _ = graph.create_operation('MatMul', 'fc', inputs=[graph.variables['x'], w],
        ...                            outputs=[graph.create_variable('y')])
        >>> graph = calibrate(quantize_graph(graph, 'TRT_INT8'), [torch.randn(4, 2)],
        ...                   progress=False)
        >>> write_quantized_parameters(graph.copy()).variables['w'].value
        tensor([[ 0.3300],
                [-1.2700]])
    """
    # every reader, quantized or not: a float reader computes with the value as it is
    written: Dict[str, Tuple[torch.Tensor, str]] = {}
    for op in graph.topological_sort():
        for index, var in enumerate(op.inputs):
            if not var.is_parameter or var.value is None:
                continue
            value = var.value.detach()
            if isinstance(op, QuantableOperation) and index < len(op.input_quant_config):
                config = op.input_quant_config[index]
                if config.state.is_activated and value.is_floating_point():
                    value = fake_quantize(value, config)
            if var.name not in written:
                written[var.name] = value, op.name
            elif not torch.equal(written[var.name][0], value):
                raise ValueError(f'parameter {var.name!r} is read with different values by '
                                 f'operations {written[var.name][1]!r} and {op.name!r} '
                                 '(quantized differently, or one computes with its float '
                                 'value); a plain ONNX model holds one value for it (export '
                                 'QDQ_ONNX instead)')
    for name, (value, _) in written.items():
        graph.variables[name].value = value
    return graph


def export_onnx(graph: BaseGraph, path: Union[str, os.PathLike, None] = None,
                quantized_parameters: bool = False) -> onnx.ModelProto:
    """The graph as a plain ONNX model, without quantization nodes.

    Args:
        graph: any graph; it is left as it is (the export works on a copy).
        path: where to save the model; nothing is saved when None.
        quantized_parameters: False (default): the FP32 model, baked parameters and the
            values PTQ passes set get their fp32 values back.  True: the values the
            quantized graph computes with (:func:`write_quantized_parameters`), what a
            runtime that quantizes a plain model itself (TensorRT's implicit INT8 mode,
            ``TRT_JSON``) must be given; the graph must be calibrated.

    Returns:
        The ONNX model.

    Raises:
        ValueError: with ``quantized_parameters``, the graph has uncalibrated configs
            (:func:`~razorlib.quantization.state.check_calibrated`), or see
            :func:`write_quantized_parameters`.

    Example:
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
    if quantized_parameters:
        check_calibrated(work, 'export_onnx(quantized_parameters=True)', error=True)
        write_quantized_parameters(work)
    else:
        dequantize_graph(work)
    return to_onnx(work, path)
