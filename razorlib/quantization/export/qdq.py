"""QDQ ONNX export: QuantizeLinear/DequantizeLinear pairs where the executor quantizes.

Every quantization the :class:`~razorlib.quantization.QuantExecutor` applies becomes ONNX:

- an activation quantized at its producer's output gets a Q/DQ pair right after the
  producer; readers (and a graph output of that name) read the DQ output;
- an activation an operation quantizes itself
  (:func:`~razorlib.quantization.quantized_inputs`) gets a Q/DQ pair in front of that
  reader, shared by the readers whose configs are in one dominance set;
- a quantized parameter becomes an integer initializer and a DequantizeLinear: int8
  weights (per channel, with ``axis``), int32 biases whose scale is input scale x weight
  scale.

Scales are float32, zero points have the integer type of the config's range (int8 for
[-128, 127] and [-127, 127], uint8 for [0, 255], int32 for 32 bits).  The export works on
a copy of the graph; the graph itself is never changed.
"""
import os
from typing import Callable, Dict, List, Tuple, Union

import onnx
import torch

from ...ir import (BaseGraph, Operation, Opset, QuantizationProperty, RoundingPolicy,
                   TensorQuantizationConfig, Variable, to_onnx)
from ..executor import quantized_inputs
from ..functional import quantize_integers
from ..state import (check_calibrated, check_not_dequantized, check_quantized_float32,
                     quantable_operations, uncalibrated_configs)

__all__ = ['MIN_QDQ_OPSET', 'check_half_to_even', 'check_quantized', 'export_qdq_onnx',
           'integer_dtype']

MIN_QDQ_OPSET = 13
"""The first opset with per-axis QuantizeLinear/DequantizeLinear."""

_INTEGER_TYPES = (torch.int8, torch.uint8, torch.int32)
_Key = Tuple[str, int]


def integer_dtype(config: TensorQuantizationConfig) -> torch.dtype:
    """The integer type that holds the config's range ``[quant_min, quant_max]``.

    Args:
        config: a quantization config.

    Returns:
        ``torch.int8``, ``torch.uint8`` or ``torch.int32``.

    Raises:
        ValueError: no such type holds the range.

    Example:
        >>> integer_dtype(TensorQuantizationConfig(quant_min=0, quant_max=255))
        torch.uint8
    """
    for dtype in _INTEGER_TYPES:
        info = torch.iinfo(dtype)
        if info.min <= config.quant_min and config.quant_max <= info.max:
            return dtype
    raise ValueError(f'no ONNX integer type holds [{config.quant_min}, {config.quant_max}]')


class _QDQWriter:
    """Edits a copy of a graph: Q/DQ pairs and integer parameters, one per config set."""

    def __init__(self, graph: BaseGraph) -> None:
        self.graph = graph
        versions = [op.opset.version for op in graph.operations.values()
                    if not op.opset.domain]
        if versions and min(versions) < MIN_QDQ_OPSET:
            raise ValueError(f'graph {graph.name!r} uses opset {min(versions)}; QDQ export '
                             f'needs opset {MIN_QDQ_OPSET} or later (re-export the model '
                             f'with opset_version={MIN_QDQ_OPSET})')
        self.opset = Opset(max(versions + [MIN_QDQ_OPSET]))
        self._params: Dict[int, Tuple[Variable, Variable]] = {}
        self._dequantized: Dict[_Key, Variable] = {}

    def quantize_output(self, op: Operation, index: int,
                        config: TensorQuantizationConfig) -> None:
        """Q/DQ after output ``index`` of ``op``; the DQ takes over the variable's name."""
        var = op.outputs[index]
        placeholder = Operation(self._name(f'{var.name}_DequantizeLinear', self.graph.operations),
                                'DequantizeLinear')
        between = self.graph.insert_op_after(placeholder, op, index)
        integers = self._variable(f'{var.name}_quantized')
        self._append('QuantizeLinear', between, integers, config)
        self.graph.replace_operation(
            placeholder, self._node('DequantizeLinear', placeholder.name, integers, var, config))

    def quantize_input(self, op: Operation, index: int,
                       config: TensorQuantizationConfig) -> None:
        """Q/DQ in front of input ``index`` of ``op`` (shared within a config set)."""
        var = op.inputs[index]
        key = (var.name, id(config.dominated_by))
        if key not in self._dequantized:
            integers = self._variable(f'{var.name}_quantized')
            self._append('QuantizeLinear', var, integers, config)
            self._dequantized[key] = self._variable(f'{var.name}_dequantized')
            self._append('DequantizeLinear', integers, self._dequantized[key], config)
        self.graph.replace_input(op, index, self._dequantized[key])

    def dequantize_parameter(self, op: Operation, index: int,
                             config: TensorQuantizationConfig) -> None:
        """An integer initializer and a DequantizeLinear in place of parameter ``index``."""
        var = op.inputs[index]
        key = (var.name, id(config.dominated_by))
        if key not in self._dequantized:
            # Clamped again in float64: float32 rounds the int32 bound 2**31 - 1 up to 2**31.
            values = quantize_integers(var.value.detach().cpu().float(), config).double().clamp(
                config.quant_min, config.quant_max)
            integers = self.graph.create_variable(
                self._name(f'{var.name}_quantized', self.graph.variables),
                values.to(integer_dtype(config)), is_parameter=True)
            self._dequantized[key] = self._variable(f'{var.name}_dequantized')
            self._append('DequantizeLinear', integers, self._dequantized[key], config)
        self.graph.replace_input(op, index, self._dequantized[key])
        if not (var.dest_ops or var.name in self.graph.inputs or var.name in self.graph.outputs):
            self.graph.remove_variable(var)

    def _append(self, op_type: str, source: Variable, target: Variable,
                config: TensorQuantizationConfig) -> None:
        name = self._name(f'{source.name}_{op_type}', self.graph.operations)
        self.graph.append_operation(self._node(op_type, name, source, target, config))

    def _node(self, op_type: str, name: str, source: Variable, target: Variable,
              config: TensorQuantizationConfig) -> Operation:
        scale, zero_point = self._quant_parameters(config)
        attributes = ({'axis': config.channel_axis}
                      if QuantizationProperty.PER_CHANNEL in config.policy else {})
        node = Operation(name, op_type, attributes, self.opset)
        node.inputs, node.outputs = [source, scale, zero_point], [target]
        return node

    def _quant_parameters(self, config: TensorQuantizationConfig) -> Tuple[Variable, Variable]:
        root = config.dominated_by
        if id(root) not in self._params:
            scale = config.scale.detach().float().cpu().clone()
            offset = torch.zeros_like(scale) if config.offset is None else config.offset
            zero_point = offset.detach().cpu().round().to(integer_dtype(config))
            self._params[id(root)] = (
                self.graph.create_variable(self._name('scale', self.graph.variables), scale,
                                           is_parameter=True),
                self.graph.create_variable(self._name('zero_point', self.graph.variables),
                                           zero_point, is_parameter=True))
        return self._params[id(root)]

    def _variable(self, base: str) -> Variable:
        return self.graph.create_variable(self._name(base, self.graph.variables))

    @staticmethod
    def _name(base: str, taken: Dict[str, object]) -> str:
        name, counter = base, 0
        while name in taken:
            counter += 1
            name = f'{base}_{counter}'
        return name


def check_half_to_even(op: Operation, config: TensorQuantizationConfig, runtime: str) -> None:
    """Refuse an activation config that does not round half to even, as ``runtime``
    quantizing it at run time does: the exported model would compute otherwise than
    ``QuantExecutor``, which rounds with the config's policy.

    Args:
        op: the operation quantizing the activation, named in the message.
        config: its config.
        runtime: what quantizes the tensor in the export (``'QuantizeLinear'``).

    Raises:
        ValueError: ``config.rounding`` is not ``ROUND_HALF_EVEN``.

    Example:
        >>> op = Operation('relu', 'Relu')
        >>> config = TensorQuantizationConfig(rounding=RoundingPolicy.ROUND_DOWN)
        >>> check_half_to_even(op, config, 'QuantizeLinear')
        Traceback (most recent call last):
        ...
        ValueError: operation 'relu': an activation quantized with rounding ROUND_DOWN; \
QuantizeLinear rounds half to even, so the export would compute otherwise than QuantExecutor \
(quantize with ROUND_HALF_EVEN)
    """
    if RoundingPolicy(config.rounding) is not RoundingPolicy.ROUND_HALF_EVEN:
        raise ValueError(f'operation {op.name!r}: an activation quantized with rounding '
                         f'{RoundingPolicy(config.rounding).name}; {runtime} rounds half to '
                         'even, so the export would compute otherwise than QuantExecutor '
                         '(quantize with ROUND_HALF_EVEN)')


def check_quantized(graph: BaseGraph, action: str) -> None:
    """Refuse a graph without quantized operations (none, or all kept in floating point):
    its INT8 model would be the FP32 one under an INT8 name (no Q/DQ pair, no range),
    written without a word.

    Args:
        graph: the graph to export.
        action: what is refused, for the message (``'export_qdq_onnx'``).

    Raises:
        ValueError: no operation of ``graph`` is quantized; the message names the graph.

    Example:
        >>> check_quantized(BaseGraph('g'), 'export_qdq_onnx')
        Traceback (most recent call last):
        ...
        ValueError: export_qdq_onnx: graph 'g' has no quantized operation, so its model \
would compute all in floating point; quantize it first (quantize_graph warns when nothing \
ends on its platform), or export it as plain ONNX
    """
    if not uncalibrated_configs(graph)[1]:  # no config with a scale: all kept in float
        raise ValueError(f'{action}: graph {graph.name!r} has no quantized operation, so its '
                         'model would compute all in floating point; quantize it first '
                         '(quantize_graph warns when nothing ends on its platform), or export '
                         'it as plain ONNX')


def _check_runtime_range(op: Operation, config: TensorQuantizationConfig) -> None:
    """QuantizeLinear saturates to its type's bounds (the config must use all of them) and
    rounds half to even."""
    check_half_to_even(op, config, 'QuantizeLinear')
    info = torch.iinfo(integer_dtype(config))
    if (config.quant_min, config.quant_max) != (info.min, info.max):
        raise ValueError(f'operation {op.name!r}: an activation quantized to '
                         f'[{config.quant_min}, {config.quant_max}] has no QuantizeLinear '
                         f'(it saturates to [{info.min}, {info.max}])')


def export_qdq_onnx(graph: BaseGraph, path: Union[str, os.PathLike, None] = None
                    ) -> onnx.ModelProto:
    """Export a calibrated graph as a QDQ ONNX model; the graph is left as it is.

    Args:
        graph: a quantized, calibrated graph (baked or not).
        path: where to save the model; nothing is saved when None.

    Returns:
        The ONNX model.

    Raises:
        ValueError: the graph has no quantized operation (:func:`check_quantized`), uses
            an opset before 13, an activation's integer range is not a whole ONNX integer
            type or its rounding not half to even (what QuantizeLinear does), configs are
            uncalibrated (no Q/DQ pair could be written for them; call ``calibrate()``
            first), or operations are left dequantized (they would be written with no Q/DQ
            pair; the message names them).
        TypeError: operations quantize a tensor of another dtype than float32 (a model
            that casts to half precision inside its forward, quantized with the
            ``aggressive`` or ``allin`` dispatcher or a ``dispatching_table``;
            :func:`~razorlib.quantization.state.check_quantized_float32`): its float16
            QuantizeLinear would take a float32 scale, and no runtime would load the model.
            ``quantize_torch_model`` refuses such a graph before calibration; a graph from
            ``quantize_graph`` and ``calibrate`` is refused here, before anything is written.

    Example:
        >>> from razorlib.ir import BaseGraph
        >>> from razorlib.quantization import calibrate, quantize_graph
        >>> graph = BaseGraph('fc')
        >>> x = graph.create_variable('x', shape=(2, 3), dtype=torch.float32)
        >>> graph.mark_variable_as_graph_input(x)
        >>> w = graph.create_variable('w', torch.randn(4, 3), is_parameter=True)
        >>> y = graph.create_variable('y', shape=(2, 4), dtype=torch.float32)
        >>> _ = graph.create_operation('Gemm', 'fc', {'transB': 1}, [x, w], [y])
        >>> graph.mark_variable_as_graph_output(y)
        >>> graph = quantize_graph(graph, 'TRT_INT8')
        >>> graph = calibrate(graph, [torch.randn(2, 3)], progress=False)
        >>> model = export_qdq_onnx(graph)
        >>> onnx.checker.check_model(model)
        >>> [node.op_type for node in model.graph.node]  # doctest: +NORMALIZE_WHITESPACE
        ['QuantizeLinear', 'DequantizeLinear', 'DequantizeLinear', 'Gemm', 'QuantizeLinear',
         'DequantizeLinear']
    """
    # first: calibrating the graph would not make it exportable
    check_quantized_float32(graph, 'export_qdq_onnx')
    check_calibrated(graph, 'export_qdq_onnx', error=True)
    check_not_dequantized(graph, 'export_qdq_onnx')  # before: it names what to restore
    check_quantized(graph, 'export_qdq_onnx')
    work = graph.copy()
    writer = _QDQWriter(work)
    plan: List[Tuple[Callable, Operation, int, TensorQuantizationConfig]] = []
    for op in quantable_operations(work):
        for index in quantized_inputs(op):
            config = op.input_quant_config[index]
            if op.inputs[index].is_parameter:
                plan.append((writer.dequantize_parameter, op, index, config))
            else:
                _check_runtime_range(op, config)
                plan.append((writer.quantize_input, op, index, config))
        for index, config in enumerate(op.output_quant_config):
            if config.state.is_activated:
                _check_runtime_range(op, config)
                plan.append((writer.quantize_output, op, index, config))
    for edit, op, index, config in plan:
        edit(op, index, config)
    return to_onnx(work, path)
