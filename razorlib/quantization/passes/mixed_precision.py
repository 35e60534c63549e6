"""MixedPrecision: keep the fewest weight layers in floating point that meet a target.

The SNR analysis (:func:`~razorlib.quantization.analyse_error`) ranks the weight layers by
the error each adds alone (its *layer SNR*, lowest first).  Layers are taken out of INT8
in that order until the graph outputs' SNR against FP32 on the calibration batches
reaches ``target_snr_db`` (or, with a ``metric``, until the metric is within
``max_drop`` of its FP32 value); then every chosen layer that the target can do without
is put back, least sensitive first, so no layer is kept in floating point that is not
needed.

A layer kept in floating point (with the activation fused into it, a ReLU or Clip)
computes with its FP32 weight and bias and quantizes neither its inputs nor its outputs
itself; a tensor it reads that its producer quantizes
for other readers stays quantized (the INT8 boundary), and the readers of its output
quantize it when they are quantized.  The QDQ export follows the same rule, so TensorRT
runs the layer in FP16 or FP32.
"""
import logging
import math
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence

import torch

from ...ir import BaseGraph, OperationQuantizationConfig, PassResult, QuantableOperation
from ...registry import PTQ_PASSES
from ...utils.checks import integer_number, real_number
from ..analysis import SNRMeter, analyse_error
from ..executor import QuantExecutor
from ..quantizers.formats import fp32_config
from ..state import dequantized
from .base import PTQPass, name_list
from .layers import weight_layers

logger = logging.getLogger(__name__)

__all__ = ['FloatedOperation', 'MixedPrecision', 'keep_in_float', 'restore_quantized']

Metric = Callable[[BaseGraph], float]


def _fused_activation(op: QuantableOperation) -> Optional[QuantableOperation]:
    """The activation (ReLU, Clip) that quantizes ``op``'s output for it, if any."""
    master = op.output_quant_config[0].master_by if op.output_quant_config else None
    readers = op.outputs[0].dest_ops if op.outputs else []
    if master is None or len(readers) != 1 or not isinstance(readers[0], QuantableOperation):
        return None
    return readers[0] if master in readers[0].output_quant_config else None


class FloatedOperation(NamedTuple):
    """What :func:`keep_in_float` changed of one operation, for :func:`restore_quantized`.

    Args:
        op: the operation.
        config: its quantization configs before.
        values: parameter input index -> the value it computed with before (a rounding
            AdaRound chose, a bias BiasCorrection moved), where its FP32 value differs.
    """
    op: QuantableOperation
    config: OperationQuantizationConfig
    values: Dict[int, torch.Tensor]


Saved = List[FloatedOperation]


def keep_in_float(op: QuantableOperation) -> Saved:
    """Make ``op`` (and the activation fused into it) compute in floating point.

    Their configs are replaced by unlinked FP32 ones; the configs they shared a scale
    with keep it among themselves.  Their parameters take their FP32 values back: the
    values a pass set for the quantized graph (AdaRound's rounding, a corrected bias)
    were chosen for a quantized layer.  :func:`restore_quantized` undoes the change.

    Example:
        >>> import torch
        >>> from razorlib.ir import BaseGraph
        >>> from razorlib.quantization import calibrate, quantize_graph
        >>> graph = BaseGraph()
        >>> graph.mark_variable_as_graph_input(graph.create_variable('x'))
        >>> w = graph.create_variable('w', torch.randn(4, 3, 1, 1), is_parameter=True)
        >>> _ = graph.create_operation('Conv', 'conv', inputs=[graph.variables['x'], w],
        ...                            outputs=[graph.create_variable('y')])
        >>> _ = graph.create_operation('Relu', 'relu', inputs=[graph.variables['y']],
        ...                            outputs=[graph.create_variable('z')])
        >>> graph = calibrate(quantize_graph(graph, 'TRT_INT8'), [torch.randn(1, 3, 4, 4)],
        ...                   progress=False)
        >>> saved = keep_in_float(graph.operations['conv'])
        >>> [(op.name, [c.state.name for c in op.output_quant_config]) for op, *_ in saved]
        [('conv', ['FP32']), ('relu', ['FP32'])]
        >>> restore_quantized(saved)
        >>> graph.operations['relu'].output_quant_config[0].state.name
        'ACTIVATED'
    """
    saved = []
    for current in (op, _fused_activation(op)):
        if current is None:
            continue
        values = {}
        for index, var in enumerate(current.inputs):
            if var.is_parameter and var.value is not None:
                fp32 = current.fp32_parameter(index).to(var.value)
                if not torch.equal(fp32, var.value):
                    values[index], var.value = var.value, fp32
        saved.append(FloatedOperation(current, current.config, values))
        current.config = OperationQuantizationConfig(
            [fp32_config() for _ in current.input_quant_config],
            [fp32_config() for _ in current.output_quant_config])
    return saved


def restore_quantized(saved: Saved) -> None:
    """Undo :func:`keep_in_float`: the configs and parameter values come back."""
    for op, config, values in reversed(saved):
        op.config = config
        for index, value in values.items():
            op.inputs[index].value = value


@PTQ_PASSES.register_module(name=['MixedPrecision', 'mixed_precision'])
class MixedPrecision(PTQPass):
    """Keep the fewest weight layers in floating point that meet a target (see the module).

    Runs after calibration, last (``stage = 'calibrated'``).  The chosen layers' names,
    the SNR reached and the target go to ``graph.extension_attrib['mixed_precision']``.
    When even ``max_layers`` float layers miss the target, the pass keeps the set that
    came closest and logs a warning.

    Args:
        target_snr_db: the SNR (dB) every graph output must reach against FP32 on the
            calibration batches.
        metric: instead of the SNR, a function of the graph (higher is better, e.g. the
            top-1 of a ``QuantExecutor`` on labelled data); Python only.
        max_drop: with ``metric``: the largest drop from the metric of the FP32 graph.
        max_layers: the most layers kept in floating point (None: any number).
        steps: how many batches the SNR is measured on (None: all).
        layers: the candidate layers' names (None: every weight layer).

    Example:
        >>> import torch
        >>> from razorlib.ir import from_torch
        >>> from razorlib.quantization import calibrate, quantize_graph
        >>> _ = torch.manual_seed(0)
        >>> net = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Linear(16, 16),
        ...                           torch.nn.Linear(16, 4))
        >>> with torch.no_grad():  # the middle layer's input 0 is always 0, and its weight
        ...     net[0].weight[0], net[0].bias[0] = 0.0, 0.0  # there spoils every row's grid
        ...     net[1].weight[:, 0] = 100.0
        >>> batches = [torch.randn(32, 16) for _ in range(2)]
        >>> graph = calibrate(quantize_graph(from_torch(net, batches[0]), 'TRT_INT8'), batches,
        ...                   progress=False)
        >>> result = MixedPrecision(target_snr_db=30)(graph, batches)
        >>> chosen = graph.extension_attrib['mixed_precision']
        >>> chosen['float_layers'] == [list(graph.operations)[1]], chosen['reached'] > 30
        (True, True)
    """

    def __init__(self, target_snr_db: Optional[float] = None, metric: Optional[Metric] = None,
                 max_drop: float = 0.0, max_layers: Optional[int] = None,
                 steps: Optional[int] = None, layers: Optional[Sequence[str]] = None) -> None:
        if (target_snr_db is None) == (metric is None):
            raise ValueError('MixedPrecision: give either target_snr_db or metric (with '
                             'max_drop), not both and not neither')
        if target_snr_db is not None:
            real_number(target_snr_db, 'MixedPrecision: target_snr_db')
        if metric is not None and not callable(metric):
            raise TypeError(f'MixedPrecision: metric must be a function of the graph, got '
                            f'{type(metric).__name__} {metric!r}')
        real_number(max_drop, 'MixedPrecision: max_drop')
        if max_drop < 0:
            raise ValueError(f'MixedPrecision: max_drop must be at least 0, got {max_drop}')
        for name, value, least in (('max_layers', max_layers, 0), ('steps', steps, 1)):
            if value is not None:
                integer_number(value, f'MixedPrecision: {name}', 'or None', minimum=least)
        layers = name_list(layers, 'MixedPrecision: layers')
        self.target_snr_db, self.metric, self.max_drop = target_snr_db, metric, max_drop
        self.max_layers, self.steps, self.layers = max_layers, steps, layers

    def call(self, graph: BaseGraph, batches: list, device) -> PassResult:
        """Choose the float layers; ``changes`` counts them."""
        batches = batches[:self.steps]
        if not batches:
            raise ValueError('MixedPrecision needs calibration batches; got none')
        score, target = self._scorer(graph, batches, device)
        candidates = {op.name: op for op in weight_layers(graph, self.layers)}
        report = analyse_error(graph, batches, len(batches), device=device)
        order = [row.name for row in report.sorted_layers('layer') if row.name in candidates]
        limit = len(order) if self.max_layers is None else min(self.max_layers, len(order))
        saved: Dict[str, Saved] = {}
        best = (score(), 0)
        for name in order[:limit]:
            if best[0] >= target:
                break
            saved[name] = keep_in_float(candidates[name])
            best = max(best, (score(), len(saved)))
        if best[0] < target:
            logger.warning('MixedPrecision: %d float layers of graph %r reach %.2f, short of '
                           'the target %.2f; keeping the best set', len(saved), graph.name,
                           best[0], target)
            for name in list(saved)[best[1]:]:
                restore_quantized(saved.pop(name))
        else:
            for name in reversed(list(saved)):  # put back what the target can do without
                restore_quantized(saved[name])
                if score() >= target:
                    del saved[name]
                else:
                    saved[name] = keep_in_float(candidates[name])
        reached = score()
        graph.extension_attrib['mixed_precision'] = dict(
            float_layers=[name for name in order if name in saved], reached=reached,
            target=target, scored_by='metric' if self.metric else 'snr_db')
        return PassResult.counted(graph, len(saved))

    def _scorer(self, graph: BaseGraph, batches: List[Any], device):
        """``(score(), target)``: the current score of the graph and the one to reach."""
        if self.metric is not None:
            with dequantized(graph):
                reference = self.metric(graph)
            return (lambda: self.metric(graph)), reference - self.max_drop
        executor = QuantExecutor(graph, device)
        with dequantized(graph):
            references = [executor(inputs) for inputs in batches]

        def snr() -> float:
            meters = [SNRMeter() for _ in graph.outputs]
            for inputs, expected in zip(batches, references):
                for meter, reference, tensor in zip(meters, expected, executor(inputs)):
                    if torch.is_tensor(reference) and reference.is_floating_point():
                        meter.update(reference, tensor)
            return min((meter.db for meter in meters), default=math.inf)

        return snr, self.target_snr_db
