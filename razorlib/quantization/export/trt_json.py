"""TensorRT dynamic ranges: a plain FP32 ONNX model and a JSON file of activation ranges.

TensorRT's implicit int8 mode takes one symmetric range per tensor
(``ITensor.setDynamicRange(-amax, amax)``) and computes weight scales itself.  Both files
are named after the path given, the model with the suffix ``.onnx`` and the ranges with
``.json`` (:func:`trt_json_paths`), so neither overwrites the other::

    {"act_quant_info": {"<tensor name>": amax, ...}}

with ``amax = scale * quant_max`` of the config that quantizes the tensor: its producer's
output config, else the first reader that quantizes it itself.
"""
import json
import os
from pathlib import Path
from typing import Dict, Tuple, Union

import onnx

from ...ir import BaseGraph, QuantizationProperty, TensorQuantizationConfig
from ..executor import quantized_inputs
from ..state import quantable_operations
from .plain import export_onnx

__all__ = ['activation_ranges', 'export_trt_json', 'trt_json_paths']


def _amax(name: str, config: TensorQuantizationConfig) -> float:
    if (QuantizationProperty.SYMMETRICAL not in config.policy
            or QuantizationProperty.PER_CHANNEL in config.policy):
        raise ValueError(f'tensor {name!r} is quantized with {config.policy}; TensorRT '
                         'dynamic ranges are per-tensor and symmetric (quantize for TRT_INT8)')
    return float(config.scale) * config.quant_max


def activation_ranges(graph: BaseGraph) -> Dict[str, float]:
    """``{tensor name: amax}`` for every activation the quantized graph quantizes.

    Args:
        graph: a calibrated graph with symmetric per-tensor activations.

    Returns:
        The ranges, in topological order of the operations that quantize the tensors.

    Raises:
        ValueError: an activation is asymmetric or per-channel.

    Example:
        >>> import torch
        >>> from razorlib.ir import BaseGraph
        >>> from razorlib.quantization import calibrate, quantize_graph
        >>> graph = BaseGraph()
        >>> graph.mark_variable_as_graph_input(graph.create_variable('x'))
        >>> relu = graph.create_operation('Relu', 'relu', inputs=[graph.variables['x']],
        ...                               outputs=[graph.create_variable('y')])
        >>> graph = quantize_graph(graph, 'TRT_INT8')
        >>> graph = calibrate(graph, [torch.tensor([-2.54, 1.27])], observer_options={
        ...     'percentile': {'percentile': 100.0}}, progress=False)
        >>> {name: round(amax, 4) for name, amax in activation_ranges(graph).items()}
        {'x': 2.54, 'y': 1.27}
    """
    ranges: Dict[str, float] = {}
    for op in quantable_operations(graph):
        for index in quantized_inputs(op):
            var = op.inputs[index]
            if not var.is_parameter and var.name not in ranges:
                ranges[var.name] = _amax(var.name, op.input_quant_config[index])
        for var, config in zip(op.outputs, op.output_quant_config):
            if config.state.is_activated:
                ranges[var.name] = _amax(var.name, config)
    return ranges


def trt_json_paths(path: Union[str, os.PathLike]) -> Tuple[Path, Path]:
    """The model and ranges files of a TRT_JSON export to ``path``: its suffix replaced by
    ``.onnx`` and by ``.json`` (added when it has none), so they never collide.

    Example:
        >>> [str(item) for item in trt_json_paths('out/ranges.json')]
        ['out/ranges.onnx', 'out/ranges.json']
        >>> [str(item) for item in trt_json_paths('out/net')]
        ['out/net.onnx', 'out/net.json']
    """
    path = Path(path)
    return path.with_suffix('.onnx'), path.with_suffix('.json')


def export_trt_json(graph: BaseGraph, path: Union[str, os.PathLike]) -> onnx.ModelProto:
    """Save the graph as a plain FP32 ONNX model and its dynamic ranges as JSON beside it.

    Args:
        graph: a calibrated graph quantized for TRT_INT8; it is left as it is.
        path: names both files (:func:`trt_json_paths`): ``net.onnx`` or ``net.json``
            writes ``net.onnx`` and ``net.json``.

    Returns:
        The ONNX model.

    Example:
        >>> import json, os, tempfile, torch
        >>> from razorlib.quantization import quantize_torch_model
        >>> net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU())
        >>> x = torch.randn(1, 3, 8, 8)
        >>> graph = quantize_torch_model(net, [x], x, progress=False)
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     model = export_trt_json(graph, os.path.join(folder, 'net.onnx'))
        ...     with open(os.path.join(folder, 'net.json')) as file:
        ...         sorted(json.load(file)['act_quant_info'])
        ['input', 'relu']
    """
    ranges = activation_ranges(graph)
    model_path, ranges_path = trt_json_paths(path)
    model = export_onnx(graph, model_path)
    ranges_path.write_text(json.dumps({'act_quant_info': ranges}, indent=2))
    return model
