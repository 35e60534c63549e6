"""TensorRT dynamic ranges: a plain ONNX model and a JSON file of activation ranges.

TensorRT's implicit int8 mode takes one symmetric range per tensor
(``ITensor.setDynamicRange(-amax, amax)``) and computes weight scales itself.  Both files
are named after the path given, the model with the suffix ``.onnx`` and the ranges with
``.json`` (:func:`trt_json_paths`), so neither overwrites the other::

    {"act_quant_info": {"<tensor name>": amax, ...}}

with ``amax = scale * quant_max`` of the config that quantizes the tensor: its producer's
output config, else the first reader that quantizes it itself.

The model holds the parameter values the quantized graph computes with
(:func:`~razorlib.quantization.export.plain.write_quantized_parameters`): the biases
BiasCorrection corrected (TensorRT keeps biases in floating point, so they are used as
written) and the weights on razorlib's grid, AdaRound's rounding included.  TensorRT
quantizes those weights again with its own scale, ``max|w| / 127`` per output channel.
That reproduces razorlib's grid exactly when every channel's largest integer is 127 (or
the channel is all zero), as with razorlib's default min-max weight scales: the written
weights are then integers times razorlib's scale and TensorRT gets the same integers.
When a channel's largest integer is smaller (a clipping observer, a scale LSQ or a pass
learned) or a weight is quantized per tensor, TensorRT's scale is finer than razorlib's,
it rounds the weights again and the rounding is only approximately kept; the export then
warns naming the layers (``QDQ_ONNX`` carries razorlib's integers exactly).

A MixedPrecision graph (``graph.extension_attrib['mixed_precision']['float_layers']``) is
refused: implicit INT8 mode runs a layer in INT8 when its input and output tensors have
ranges, and a float layer's input and output ranges are needed as well by the INT8 layers
before and after it, so no set of ranges keeps exactly those layers in floating point.
Export such a graph as ``QDQ_ONNX`` (TensorRT's explicit quantization), whose Q/DQ pairs
say exactly which layers run in INT8.  For the same reason a weight layer the dispatcher
left in FP32 (``dispatching_table``) is refused when its input and output both have
ranges (the quantized operations around it quantize them): TensorRT would run it in INT8.

A dynamic range carries no rounding policy (TensorRT rounds to nearest even, as
QuantizeLinear), so an activation config that rounds otherwise is refused, and so is a
graph with operations left dequantized (``dequantize()``: they would have no range and
run in floating point in a model given as quantized).
"""
import json
import os
from pathlib import Path
from typing import Dict, List, Tuple, Union

import onnx

from ...ir import (BaseGraph, Operation, QuantableOperation, QuantizationProperty,
                   TensorQuantizationConfig)
from ...utils.caller import warn_at_caller
from ..executor import quantized_inputs
from ..functional import quantize_integers
from ..passes.layers import LAYER_TYPES
from ..state import check_calibrated, check_not_dequantized, quantable_operations
from .plain import export_onnx
from .qdq import check_half_to_even, check_quantized

__all__ = ['TRT_WEIGHT_QUANT_MAX', 'activation_ranges', 'export_trt_json', 'float_layers',
           'trt_json_paths', 'weights_off_trt_grid']

TRT_WEIGHT_QUANT_MAX = 127
"""TensorRT's implicit weight scale is ``max|w| / TRT_WEIGHT_QUANT_MAX`` per channel."""


def _amax(op: Operation, name: str, config: TensorQuantizationConfig) -> float:
    check_half_to_even(op, config, 'TensorRT')
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
        ValueError: an activation is asymmetric, per-channel or not rounded half to even,
            operations are left dequantized, or weight layers are kept in floating point
            (MixedPrecision's, or the dispatcher's between ranges; named): ranges alone
            would quantize them.

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
    check_not_dequantized(graph, 'activation_ranges')
    return _checked_ranges(graph, 'activation_ranges')


def _checked_ranges(graph: BaseGraph, action: str) -> Dict[str, float]:
    """The ranges of :func:`activation_ranges`, checked for ``action``: the caller has
    refused operations left dequantized (:func:`export_trt_json` does so before
    ``check_quantized``, so that a wholly dequantized graph is told what to restore)."""
    ranges: Dict[str, float] = {}
    for op in quantable_operations(graph):
        for index in quantized_inputs(op):
            var = op.inputs[index]
            if not var.is_parameter and var.name not in ranges:
                ranges[var.name] = _amax(op, var.name, op.input_quant_config[index])
        for var, config in zip(op.outputs, op.output_quant_config):
            if config.state.is_activated:
                ranges[var.name] = _amax(op, var.name, config)
    _refuse_float_layers(graph, ranges, action)
    return ranges


def float_layers(graph: BaseGraph) -> List[str]:
    """The weight layers kept in floating point: those MixedPrecision chose (still in the
    graph), then any other quantable weight layer whose weight is not quantized
    (``keep_in_float`` called by hand).  The layers a dispatcher leaves in FP32 are not
    quantable operations, and not listed.

    Example:
        >>> float_layers(BaseGraph())
        []
    """
    chosen = graph.extension_attrib.get('mixed_precision') or {}
    kept = [name for name in chosen.get('float_layers', ()) if name in graph.operations]
    for op in quantable_operations(graph):
        if (op.type in LAYER_TYPES and op.name not in kept and not op.is_dequantized
                and len(op.inputs) > 1 and op.inputs[1].is_parameter
                and not op.input_quant_config[1].state.is_quantized):
            kept.append(op.name)
    return kept


def _dispatched_float_layers(graph: BaseGraph, ranges: Dict[str, float]) -> List[str]:
    """The weight layers the dispatcher left in FP32 (no quantable operations) whose input
    and output both have ranges: TensorRT would run them in INT8."""
    return [op.name for op in graph.topological_sort()
            if op.type in LAYER_TYPES and not isinstance(op, QuantableOperation)
            and len(op.inputs) > 1 and op.inputs[1].is_parameter
            and op.inputs[0].name in ranges and op.outputs[0].name in ranges]


def _refuse_float_layers(graph: BaseGraph, ranges: Dict[str, float], action: str) -> None:
    """Refuse a graph with weight layers kept in floating point that dynamic ranges cannot
    keep there: its :func:`float_layers`, and the layers the dispatcher left in FP32
    between ranges.

    TensorRT's implicit INT8 mode runs a layer in INT8 once its input and output have
    ranges, and the INT8 layers around a float layer need those ranges: a consumer of the
    ranges alone would quantize the layers kept in floating point.

    Args:
        graph: a quantized graph.
        ranges: its activation ranges.
        action: what is refused, for the message (``'export_trt_json'``).

    Raises:
        ValueError: naming the first five float layers; export ``QDQ_ONNX`` instead.
    """
    kept = float_layers(graph) + _dispatched_float_layers(graph, ranges)
    if kept:
        raise ValueError(f'{action}: graph {graph.name!r} keeps layers in floating point '
                         f'({", ".join(kept[:5])}'
                         f'{", ..." if len(kept) > 5 else ""}), which dynamic ranges cannot '
                         'express: TensorRT\'s implicit INT8 mode runs a layer in INT8 once its '
                         'input and output have ranges, and the INT8 layers around it need '
                         'them; export QDQ_ONNX instead')


def weights_off_trt_grid(graph: BaseGraph) -> List[str]:
    """The operations whose quantized weights TensorRT's own scale would round again.

    TensorRT quantizes a weight with ``max|w| / 127`` per output channel; that is
    razorlib's scale when every channel of the integers razorlib rounds the weight to has
    the largest magnitude 127, or is all zero.  A per-tensor weight, or a channel whose
    largest integer is smaller (or -128), is listed.

    Example:
        >>> import torch
        >>> from razorlib.quantization import calibrate, quantize_graph
        >>> graph = BaseGraph()
        >>> graph.mark_variable_as_graph_input(graph.create_variable('x'))
        >>> w = graph.create_variable('w', torch.tensor([[0.5], [-1.27]]), is_parameter=True)
        >>> _ = graph.create_operation('MatMul', 'fc', inputs=[graph.variables['x'], w],
        ...                            outputs=[graph.create_variable('y')])
        >>> graph = calibrate(quantize_graph(graph, 'TRT_INT8'), [torch.randn(4, 2)],
        ...                   progress=False)
        >>> weights_off_trt_grid(graph)  # min-max scales: max|w| is 127 steps
        []
        >>> graph.operations['fc'].input_quant_config[1].scale *= 2  # a clipping scale
        >>> weights_off_trt_grid(graph)
        ['fc']
    """
    listed = []
    for op in quantable_operations(graph):
        for index in quantized_inputs(op):
            var, config = op.inputs[index], op.input_quant_config[index]
            if not var.is_parameter or var.value is None or config.state.is_passive:
                continue
            if QuantizationProperty.PER_CHANNEL not in config.policy:
                listed.append(op.name)
                break
            integers = quantize_integers(var.value.detach().float(), config)
            if config.offset is not None:
                integers = integers - _broadcast(config.offset, integers, config.channel_axis)
            axes = [axis for axis in range(integers.dim())
                    if axis != config.channel_axis % max(integers.dim(), 1)]
            largest = integers.abs().amax(dim=axes) if axes else integers.abs()
            if not bool(((largest == 0) | (largest == TRT_WEIGHT_QUANT_MAX)).all()):
                listed.append(op.name)
                break
    return listed


def _broadcast(offset, integers, axis: int):
    shape = [1] * integers.dim()
    shape[axis] = -1
    return offset.to(integers).reshape(shape) if offset.numel() > 1 else offset.to(integers)


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
    """Save the graph as a plain ONNX model and its dynamic ranges as JSON beside it.

    The model holds the parameter values the quantized graph computes with (corrected
    biases, weights on razorlib's grid with AdaRound's rounding; see the module).

    Args:
        graph: a calibrated graph quantized for TRT_INT8; it is left as it is.
        path: names both files (:func:`trt_json_paths`): ``net.onnx`` or ``net.json``
            writes ``net.onnx`` and ``net.json``.

    Returns:
        The ONNX model.

    Raises:
        ValueError: the graph has no quantized operation (no range to write), uncalibrated
            configs, operations left dequantized, an asymmetric, per-channel or not
            half-to-even activation, or weight layers kept in floating point
            (MixedPrecision's, or the dispatcher's between two ranges; named; export
            ``QDQ_ONNX`` instead).

    Warns:
        UserWarning: TensorRT's own weight scales would round some layers' weights again
            (:func:`weights_off_trt_grid`): their rounding is only approximately kept.

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
    check_calibrated(graph, 'export_trt_json', error=True)
    check_not_dequantized(graph, 'export_trt_json')  # before: it names what to restore
    check_quantized(graph, 'export_trt_json')
    ranges = _checked_ranges(graph, 'export_trt_json')
    off_grid = weights_off_trt_grid(graph)
    if off_grid:
        warn_at_caller(f'export_trt_json: TensorRT computes weight scales itself '
                       f'(max|w| / {TRT_WEIGHT_QUANT_MAX} per channel), which differ from '
                       f'razorlib\'s for {len(off_grid)} layers ({", ".join(off_grid[:5])}'
                       f'{", ..." if len(off_grid) > 5 else ""}): TensorRT rounds their weights '
                       'again, so their rounding is only approximately kept (QDQ_ONNX keeps it '
                       'exactly)')
    model_path, ranges_path = trt_json_paths(path)
    model = export_onnx(graph, model_path, quantized_parameters=True)
    ranges_path.write_text(json.dumps({'act_quant_info': ranges}, indent=2))
    return model
