"""What the PTQ passes share: the weight layers of a graph, and their inputs and outputs
recorded on calibration batches, in FP32 and in the quantized graph.

A *weight layer* is a quantable Conv, ConvTranspose, Gemm or MatMul whose input 1 is a
parameter: the operations whose weights AdaRound rounds, whose biases bias correction
shifts and which mixed precision may keep in floating point.  :func:`record_layer` runs
the graph up to one such layer only (the rest of the graph is not computed), once
dequantized (the FP32 reference) and once quantized.

The passes that rewrite a layer together with the one after it (equalization, clip
equalization, centring) walk narrower ground: a *channel layer*
(:func:`is_channel_layer`, a Conv or plain Gemm of any graph, quantized or not) whose
output only one operation reads (:func:`sole_reader`), through a ReLU6 written as a
Clip with constant bounds (:func:`clip_bounds`), one from 0 for the passes that rescale
or shift its output (:func:`clip_from_zero`).
"""
from typing import Any, List, NamedTuple, Optional, Sequence, Tuple

import torch

from ...ir import BaseGraph, Operation, QuantableOperation, TorchExecutor
from ..executor import QuantExecutor, quantized_inputs
from ..functional import fake_quantize
from ..state import dequantized, quantable_operations

__all__ = ['LAYER_TYPES', 'LayerRecord', 'clip_bounds', 'clip_from_zero', 'is_channel_layer',
           'kernel_output', 'output_channel_axis', 'record_layer', 'sole_reader', 'weight_layers']

LAYER_TYPES = ('Conv', 'ConvTranspose', 'Gemm', 'MatMul')
"""The op types whose weight (input 1) the PTQ passes work on."""

_OUTPUT_CHANNEL_AXIS = {'Conv': 1, 'ConvTranspose': 1, 'Gemm': -1, 'MatMul': -1}


def output_channel_axis(op: Operation) -> int:
    """The axis of ``op``'s output that holds its channels (its bias's axis).

    Example:
        >>> from razorlib.ir import Operation
        >>> output_channel_axis(Operation('c', 'Conv')), output_channel_axis(Operation('g', 'Gemm'))
        (1, -1)
    """
    return _OUTPUT_CHANNEL_AXIS[op.type]


def weight_layers(graph, names: Optional[Sequence[str]] = None) -> List[QuantableOperation]:
    """The weight layers of a quantized graph, in topological order.

    Args:
        graph: a quantized graph.
        names: keep only these operations (None: all).

    Raises:
        KeyError: a name in ``names`` is no weight layer of the graph.

    Example:
        >>> from razorlib.ir import BaseGraph
        >>> weight_layers(BaseGraph())
        []
    """
    layers = [op for op in quantable_operations(graph)
              if op.type in LAYER_TYPES and len(op.inputs) > 1 and op.inputs[1].is_parameter
              and op.inputs[1].value is not None]
    if names is None:
        return layers
    known = {op.name for op in layers}
    missing = [name for name in names if name not in known]
    if missing:
        raise KeyError(f'graph {graph.name!r} has no quantized weight layer named {missing}; '
                       f'its weight layers are {sorted(known)}')
    return [op for op in layers if op.name in set(names)]


def is_channel_layer(op: Operation) -> bool:
    """Whether ``op`` is a Conv, or a Gemm on an untransposed 2-D input, whose weight is a
    parameter with a value: a layer whose output channels the equalization and centring
    passes may rescale or shift, and whose input channels they may compensate.  Its
    weight and bias must be its own (no other operation reads them): those passes rewrite
    them in place, which would change a layer that shares them (a module called twice,
    exported without the format passes that give each call its own copy).

    Example:
        >>> import torch
        >>> from razorlib.ir import from_torch
        >>> net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 1), torch.nn.ReLU6())
        >>> [(op.type, is_channel_layer(op))
        ...  for op in from_torch(net, torch.randn(1, 3, 4, 4)).topological_sort()]
        [('Conv', True), ('Clip', False)]
    """
    if op.type not in ('Conv', 'Gemm') or len(op.inputs) < 2:
        return False
    weight = op.inputs[1]
    if not weight.is_parameter or weight.value is None or any(
            var.is_parameter and any(reader is not op for reader in var.dest_ops)
            for var in op.inputs[1:3]):
        return False
    return op.type == 'Conv' or (not op.attributes.get('transA', 0) and weight.value.dim() == 2)


def sole_reader(graph: BaseGraph, op: Operation) -> Optional[Operation]:
    """The one operation that reads ``op``'s single output, which is no graph output;
    None if there are several, none, or the output leaves the graph (a rewrite of the
    tensor would then change what another reader or the user sees).

    Example:
        >>> import torch
        >>> from razorlib.ir import from_torch
        >>> net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 1), torch.nn.ReLU6())
        >>> graph = from_torch(net, torch.randn(1, 3, 4, 4))
        >>> conv, clip = graph.topological_sort()
        >>> sole_reader(graph, conv) is clip, sole_reader(graph, clip)
        (True, None)
    """
    var = op.outputs[0]
    if len(op.outputs) != 1 or len(var.dest_ops) != 1 or var.name in graph.outputs:
        return None
    return var.dest_ops[0]


def clip_bounds(op: Operation) -> Optional[Tuple[float, float]]:
    """``(low, high)`` of a Clip whose bounds are constants (ONNX inputs 1 and 2), else
    None: a ReLU6 as the exporter writes it.

    Example:
        >>> import torch
        >>> from razorlib.ir import from_torch
        >>> net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 1), torch.nn.ReLU6())
        >>> [clip_bounds(op) for op in from_torch(net, torch.randn(1, 3, 4, 4)).topological_sort()]
        [None, (0.0, 6.0)]
    """
    if op.type != 'Clip' or len(op.inputs) != 3:
        return None
    bounds = [var.value for var in op.inputs[1:]]
    if any(value is None or value.numel() != 1 for value in bounds):
        return None
    return float(bounds[0]), float(bounds[1])


def clip_from_zero(op: Operation) -> Optional[float]:
    """The upper bound ``high`` of a ``Clip(0, high)`` with ``high > 0`` and constant
    bounds (a ReLU6, ``high = 6``), else None: the Clips whose output a pass may rescale
    or shift channel by channel, as the bound 0 maps to itself.

    Example:
        >>> import torch
        >>> from razorlib.ir import from_torch
        >>> net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 1), torch.nn.ReLU6(),
        ...                           torch.nn.Conv2d(4, 4, 1), torch.nn.Hardtanh(-1.0, 1.0))
        >>> graph = from_torch(net, torch.randn(1, 3, 4, 4))
        >>> [clip_from_zero(op) for op in graph.topological_sort()]
        [None, 6.0, None, None]
    """
    bounds = clip_bounds(op)
    if bounds is None or bounds[0] != 0.0 or bounds[1] <= 0.0:
        return None
    return bounds[1]


class LayerRecord(NamedTuple):
    """One batch seen by one layer.

    Args:
        fp32_inputs: its inputs in the FP32 graph.
        fp32_output: its output 0 in the FP32 graph.
        quant_inputs: its inputs in the quantized graph, quantized as the layer itself
            quantizes them (its weight and bias included), ready for its kernel.
    """
    fp32_inputs: List[Optional[torch.Tensor]]
    fp32_output: torch.Tensor
    quant_inputs: List[Optional[torch.Tensor]]


class _Reached(Exception):
    """Raised by a hook to stop a run once the layer of interest ran."""


def _run_until(executor: QuantExecutor, inputs: Any, op: Operation, post: bool) -> list:
    """Run ``executor`` up to ``op``; its inputs (and outputs when ``post``) as they were."""
    seen: list = []

    def pre_hook(current, op_inputs):
        if current is op and not post:
            seen.append(list(op_inputs))
            raise _Reached

    def post_hook(current, op_inputs, outputs):
        if current is op:
            seen.extend([list(op_inputs), list(outputs)])
            raise _Reached

    handle = (executor.register_forward_hook(post_hook) if post
              else executor.register_forward_pre_hook(pre_hook))
    try:
        executor(inputs)
    except _Reached:
        pass
    finally:
        handle.remove()
    if not seen:
        raise RuntimeError(f'operation {op.name!r} did not run in graph '
                           f'{executor.graph.name!r}')
    return seen


def _quantized_as_op_does(op: QuantableOperation, inputs: list) -> list:
    inputs = list(inputs)
    for index in quantized_inputs(op):
        config = op.input_quant_config[index]
        if inputs[index] is not None and config.state.is_activated:
            inputs[index] = fake_quantize(inputs[index], config)
    return inputs


def record_layer(executor: QuantExecutor, op: QuantableOperation, batches: Sequence[Any]
                 ) -> List[LayerRecord]:
    """Record ``op``'s inputs and output on every batch, in FP32 and quantized.

    The graph runs up to ``op`` only, twice per batch: dequantized, then quantized as it
    stands (with every change made to the layers before ``op``).

    Args:
        executor: a :class:`~razorlib.quantization.QuantExecutor` of the graph.
        op: a quantable operation of the graph.
        batches: graph inputs, one run each.

    Returns:
        One :class:`LayerRecord` per batch.
    """
    records = []
    for inputs in batches:
        with dequantized(executor.graph):
            fp32_inputs, fp32_outputs = _run_until(executor, inputs, op, post=True)
        quant_inputs, = _run_until(executor, inputs, op, post=False)
        records.append(LayerRecord(fp32_inputs, fp32_outputs[0],
                                   _quantized_as_op_does(op, quant_inputs)))
    return records


def kernel_output(executor: TorchExecutor, op: Operation,
                  inputs: Sequence[Optional[torch.Tensor]]) -> torch.Tensor:
    """``op``'s kernel on ``inputs`` as they are (no quantization), output 0.

    Differentiable when called under ``torch.enable_grad()``: AdaRound fits a weight
    through it.

    Example:
        >>> from razorlib.ir import BaseGraph
        >>> graph = BaseGraph()
        >>> graph.mark_variable_as_graph_input(graph.create_variable('x'))
        >>> w = graph.create_variable('w', torch.ones(1, 2), is_parameter=True)
        >>> op = graph.create_operation('MatMul', inputs=[graph.variables['x'], w],
        ...                             outputs=[graph.create_variable('y')])
        >>> kernel_output(TorchExecutor(graph), op, [torch.ones(1, 1), torch.full((1, 2), 3.)])
        tensor([[3., 3.]])
    """
    return TorchExecutor.run_operation(executor, op, list(inputs))[0]
