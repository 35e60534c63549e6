"""BiasCorrection: remove the mean shift that quantization adds to each layer's output.

Empirical bias correction (Nagel et al. 2019; PPQ's ``BiasCorrectionPass``): rounding the
weights of a layer is not unbiased per output channel, and neither is clipping its
inputs, so ``E[y_int8] - E[y_fp32]`` is a systematic shift per channel that no later
layer removes.  On the calibration batches, each weight layer's output (before its
activation and its output quantization) is compared in the quantized graph, with every
correction made upstream, and in the FP32 graph; the mean difference per output channel
is subtracted from its bias.  Layers are corrected in topological order.  The FP32 bias
stays aside: a dequantized graph (the FP32 reference) computes what it computed before.

A Gemm adds ``beta * C``: its bias moves by ``shift / beta``, so that its output moves by
the shift; ``alpha`` scales ``A x B`` only, on both sides of the measured difference, and
needs no care.  A Gemm with ``beta = 0`` ignores its bias, and one whose bias does not
hold one value per output channel (a scalar, a column) cannot take a shift per channel:
both are skipped, with a log line.
"""
import logging
from typing import Optional, Sequence

import torch

from ...ir import BaseGraph, PassResult
from ...registry import PTQ_PASSES
from ...utils.checks import integer_number
from ..executor import QuantExecutor
from .base import PTQPass, name_list
from .layers import kernel_output, output_channel_axis, record_layer, weight_layers

logger = logging.getLogger(__name__)

__all__ = ['BiasCorrection', 'channel_means']


def channel_means(tensor: torch.Tensor, axis: int) -> torch.Tensor:
    """The mean of ``tensor`` per index of ``axis``, over every other axis (float64).

    Example:
        >>> channel_means(torch.tensor([[1., 2.], [3., 6.]]), -1)
        tensor([2., 4.], dtype=torch.float64)
    """
    axis = axis % tensor.dim()
    return tensor.double().transpose(0, axis).reshape(tensor.shape[axis], -1).mean(1)


@PTQ_PASSES.register_module(name=['BiasCorrection', 'bias_correction'])
class BiasCorrection(PTQPass):
    """Shift each weight layer's bias by the mean error quantization adds to its output.

    Runs after calibration (``stage = 'calibrated'``), and after AdaRound when both are
    listed (bias correction then removes what rounding left).  A layer without a bias
    (its input 2) is skipped, and so is a Gemm with ``beta = 0`` or whose bias is not one
    value per output channel (logged); a Gemm's bias moves by ``shift / beta``.

    Args:
        steps: how many of the batches to measure on (None: all).
        layers: the names of the layers to correct (None: every weight layer).

    Example:
        >>> import torch
        >>> from razorlib.ir import from_torch
        >>> from razorlib.quantization import QuantExecutor, calibrate, quantize_graph
        >>> _ = torch.manual_seed(0)
        >>> net = torch.nn.Linear(64, 4)
        >>> with torch.no_grad():  # every weight a third of a step above a grid point
        ...     _ = net.weight.fill_((1 + 1 / 3) / 127); net.weight[:, 0] = 1
        >>> batches = [torch.rand(16, 64) for _ in range(4)]
        >>> graph = quantize_graph(from_torch(net, batches[0]), 'TRT_INT8')
        >>> graph = calibrate(graph, batches, progress=False)
        >>> def shift():
        ...     with torch.no_grad():
        ...         return float((QuantExecutor(graph)(batches[0])[0] - net(batches[0])).mean())
        >>> round(shift(), 2)
        -0.08
        >>> BiasCorrection()(graph, batches).changes, abs(shift()) < 0.01
        (1, True)
    """

    def __init__(self, steps: Optional[int] = None,
                 layers: Optional[Sequence[str]] = None) -> None:
        if steps is not None:
            steps = integer_number(steps, 'BiasCorrection: steps', 'or None', minimum=1)
        self.steps, self.layers = steps, name_list(layers, 'BiasCorrection: layers')

    def call(self, graph: BaseGraph, batches: list, device) -> PassResult:
        """Correct every weight layer with a bias; ``changes`` counts them."""
        batches = batches[:self.steps]
        if not batches:
            raise ValueError('BiasCorrection needs calibration batches; got none')
        executor = QuantExecutor(graph, device)
        corrected = 0
        for op in weight_layers(graph, self.layers):
            if len(op.inputs) < 3 or not op.inputs[2].is_parameter or op.inputs[2].value is None:
                continue
            bias_factor = _bias_factor(op)
            if bias_factor is None:
                continue
            axis = output_channel_axis(op)
            # each batch's mean weighs by the values it averages, so that batches of
            # different sizes (a last, partial batch) give the mean over every sample
            difference, count = 0, 0
            for record in record_layer(executor, op, batches):
                with torch.no_grad():
                    quantized = kernel_output(executor, op, record.quant_inputs)
                values = record.fp32_output.numel() // record.fp32_output.shape[axis]
                difference = difference + values * (
                    channel_means(record.fp32_output, axis) - channel_means(quantized, axis))
                count += values
            shift = difference / count
            bias = op.inputs[2].value
            if bias.dim() == 0 or bias.shape[-1] != len(shift):
                logger.info('BiasCorrection: skipped %s %r: its bias of shape %s is not one '
                            'value per output channel (%d)', op.type, op.name,
                            tuple(bias.shape), len(shift))
                continue
            op.set_parameter_value(2, bias + (shift / bias_factor).to(bias))
            corrected += 1
        return PassResult.counted(graph, corrected)


def _bias_factor(op) -> Optional[float]:
    """What ``op`` multiplies its bias by (a Gemm's ``beta``, else 1); None, logged, for a
    Gemm with ``beta = 0``, whose bias no shift can correct.

    Example:
        >>> from razorlib.ir import Operation
        >>> _bias_factor(Operation('fc', 'Gemm', attributes={'beta': 0.5}))
        0.5
        >>> _bias_factor(Operation('fc', 'Gemm', attributes={'beta': 0.0})) is None
        True
    """
    if op.type != 'Gemm':
        return 1.0
    beta = float(op.attributes.get('beta', 1.0))
    if beta == 0:
        logger.info('BiasCorrection: skipped Gemm %r: beta is 0, so its bias (input 2) does '
                    'not reach its output', op.name)
        return None
    return beta
