"""AdaRound: choose each weight's rounding, up or down, to reconstruct the layer's output.

Nagel et al., *Up or Down? Adaptive Rounding for Post-Training Quantization* (2020), as in
PPQ and BRECQ: a weight ``w`` with scale ``s`` becomes ``s * (floor(w / s) + h(V))``, where
``h(V) = clamp(sigmoid(V) (zeta - gamma) + gamma, 0, 1)`` is learned per weight by Adam
to minimize the squared error between the layer's output on its quantized inputs (the
quantized graph up to it, every layer before it rounded already) and its output in the
FP32 graph, plus ``reg_weight * sum(1 - |2 h - 1|^beta)``, which pushes every ``h`` to 0
or 1 as ``beta`` anneals from 20 to 2 after a warm-up without it.  Then each weight is
rounded by ``h >= 0.5``.  A layer whose learned rounding reconstructs the calibration
batches worse than rounding to nearest keeps the nearest one, so the pass never makes a
layer's error larger on the data it saw.  The FP32 weights stay aside (a dequantized graph
is the FP32 reference); the scales are the calibrated ones.
"""
import logging
from typing import List, Optional, Sequence

import torch

from ...ir import BaseGraph, PassResult, QuantableOperation, QuantizationStates
from ...registry import PTQ_PASSES
from ...utils.checks import integer_number, real_number
from ..executor import QuantExecutor
from ..functional import config_scale_offset
from .base import PTQPass, name_list
from .layers import LayerRecord, kernel_output, record_layer, weight_layers

logger = logging.getLogger(__name__)

__all__ = ['AdaRound', 'rectified_sigmoid']

_ZETA, _GAMMA = 1.1, -0.1


def rectified_sigmoid(v: torch.Tensor) -> torch.Tensor:
    """AdaRound's ``h(V)``: a sigmoid stretched to ``[-0.1, 1.1]`` and clipped to [0, 1].

    Example:
        >>> rectified_sigmoid(torch.tensor([-10.0, 0.0, 10.0]))
        tensor([0.0000, 0.5000, 1.0000])
    """
    return (torch.sigmoid(v) * (_ZETA - _GAMMA) + _GAMMA).clamp(0, 1)


def _initial_v(rest: torch.Tensor) -> torch.Tensor:
    """The ``V`` with ``h(V) = rest`` (the fractional part), so training starts at ``w``."""
    rest = rest.clamp(1e-4, 1 - 1e-4)
    return -torch.log((_ZETA - _GAMMA) / (rest - _GAMMA) - 1)


def _error(executor, op, records: Sequence[LayerRecord], weight: torch.Tensor) -> float:
    total = 0.0
    with torch.no_grad():
        for record in records:
            inputs = list(record.quant_inputs)
            inputs[1] = weight
            total += float((kernel_output(executor, op, inputs) - record.fp32_output)
                           .double().square().sum())
    return total


@PTQ_PASSES.register_module(name=['AdaRound', 'adaround'])
class AdaRound(PTQPass):
    """Learn the rounding of every weight layer's weights (see the module docstring).

    Runs after calibration (``stage = 'calibrated'``); list it before ``BiasCorrection``
    and ``MixedPrecision``.  Each layer costs ``steps`` forward and backward passes of the
    layer alone on ``batch_size`` samples, plus two runs of the graph up to it per batch.

    Args:
        steps: Adam steps per layer.
        batch_size: samples (axis 0 of the layer's input) per step, drawn from the batches.
        lr: Adam's learning rate for ``V``.
        reg_weight: the weight of the rounding regularizer, against a reconstruction
            error measured relative to rounding to nearest (1 at nearest) and a
            regularizer averaged over the weights: the paper's 0.01 on a sum over the
            weights and an absolute error.  Too weak a regularizer leaves every ``h``
            near its fractional part, and its threshold is rounding to nearest.
        beta: the regularizer's exponent, annealed from ``beta[0]`` to ``beta[1]``.
        warmup: the share of the steps without the regularizer.
        layers: the names of the layers to round (None: every weight layer).
        seed: seeds the sampling of ``batch_size`` samples.

    Example:
        >>> import torch
        >>> from razorlib.ir import from_torch
        >>> from razorlib.quantization import calibrate, quantize_graph
        >>> _ = torch.manual_seed(0)
        >>> net = torch.nn.Linear(32, 8)
        >>> batches = [torch.randn(64, 32) + 1 for _ in range(2)]
        >>> graph = quantize_graph(from_torch(net, batches[0]), 'TRT_INT8')
        >>> graph = calibrate(graph, batches, progress=False)
        >>> result = AdaRound(steps=200)(graph, batches)
        >>> errors, = graph.extension_attrib['adaround'].values()
        >>> result.changes, errors['adaround'] < errors['nearest']
        (1, True)
    """

    def __init__(self, steps: int = 500, batch_size: int = 64, lr: float = 0.05,
                 reg_weight: float = 10.0, beta: Sequence[float] = (20.0, 2.0),
                 warmup: float = 0.2, layers: Optional[Sequence[str]] = None,
                 seed: int = 0) -> None:
        steps = integer_number(steps, 'AdaRound: steps', 'Adam steps per layer')
        batch_size = integer_number(batch_size, 'AdaRound: batch_size', 'samples per step')
        lr, reg_weight = (real_number(lr, 'AdaRound: lr'),
                          real_number(reg_weight, 'AdaRound: reg_weight'))
        warmup = real_number(warmup, 'AdaRound: warmup', 'a share of the steps')
        if isinstance(beta, str) or not isinstance(beta, Sequence) or len(beta) != 2:
            raise TypeError(f'AdaRound: beta must be a pair (start, end), got {beta!r}')
        beta = tuple(real_number(value, 'AdaRound: beta') for value in beta)
        layers = name_list(layers, 'AdaRound: layers')
        seed = integer_number(seed, 'AdaRound: seed', 'a random seed')
        if steps < 1 or batch_size < 1 or not 0 <= warmup < 1:
            raise ValueError(f'AdaRound: steps and batch_size must be >= 1 and warmup in '
                             f'[0, 1), got {steps}, {batch_size}, {warmup}')
        if lr <= 0 or reg_weight < 0:  # else torch.optim.Adam refuses lr after calibration
            raise ValueError(f'AdaRound: lr must be > 0 and reg_weight >= 0, got {lr} and '
                             f'{reg_weight}')
        self.steps, self.batch_size, self.lr = steps, batch_size, lr
        self.reg_weight, self.beta, self.warmup = reg_weight, beta, warmup
        self.layers, self.seed = layers, seed

    def call(self, graph: BaseGraph, batches: list, device) -> PassResult:
        """Round every weight layer whose weight is quantized at run time (ACTIVATED);
        ``changes`` counts the layers that kept a learned rounding, and
        ``graph.extension_attrib['adaround'][name]`` has each layer's squared errors
        (``nearest``, ``adaround``) and their quotient ``gain``."""
        if not batches:
            raise ValueError('AdaRound needs calibration batches; got none')
        executor = QuantExecutor(graph, device)
        generator = torch.Generator().manual_seed(self.seed)
        summary = graph.extension_attrib.setdefault('adaround', {})
        rounded = 0
        for op in weight_layers(graph, self.layers):
            config = op.input_quant_config[1]
            if config.state is not QuantizationStates.ACTIVATED:
                continue
            records = record_layer(executor, op, batches)
            nearest = records[0].quant_inputs[1]
            learned = self._fit(executor, op, records, generator)
            errors = (_error(executor, op, records, nearest),
                      _error(executor, op, records, learned))
            summary[op.name] = dict(nearest=errors[0], adaround=errors[1],
                                    gain=errors[0] / max(errors[1], 1e-30))
            if errors[1] < errors[0]:
                op.set_parameter_value(1, learned)
                rounded += 1
            else:
                logger.info('AdaRound: %s %r keeps rounding to nearest (%.4g <= %.4g)', op.type,
                            op.name, errors[0], errors[1])
        return PassResult.counted(graph, rounded)

    def _fit(self, executor, op: QuantableOperation, records: List[LayerRecord],
             generator: torch.Generator) -> torch.Tensor:
        """The weight with the learned rounding, on the quantization grid."""
        weight = op.inputs[1].value.detach()
        config = op.input_quant_config[1]
        scale, offset = config_scale_offset(config, weight)
        floor = torch.floor(weight / scale)
        v = _initial_v(weight / scale - floor).requires_grad_(True)
        optimizer = torch.optim.Adam([v], lr=self.lr)
        warm = int(self.warmup * self.steps)
        # the reconstruction error relative to rounding to nearest's: the loss starts near
        # 1 on layers of any scale, so one regularizer weight fits them all
        energy = 0.0
        for record in records:
            energy += float((kernel_output(executor, op, record.quant_inputs).detach()
                             - record.fp32_output).double().square().mean())
        energy = energy / len(records) or 1.0

        def weight_of(h: torch.Tensor) -> torch.Tensor:
            integers = (floor + h + offset).clamp(config.quant_min, config.quant_max)
            return (integers - offset) * scale

        for step in range(self.steps):
            record = records[int(torch.randint(len(records), (1, ), generator=generator))]
            count = record.fp32_output.shape[0]
            rows = torch.randperm(count, generator=generator)[:self.batch_size]
            inputs = [tensor[rows] if index == 0 else tensor
                      for index, tensor in enumerate(record.quant_inputs)]
            target = record.fp32_output[rows]
            with torch.enable_grad():
                h = rectified_sigmoid(v)
                inputs[1] = weight_of(h)
                output = kernel_output(executor, op, inputs)
                loss = (output - target).square().mean() / energy
                if step >= warm:
                    progress = (step - warm) / max(self.steps - warm, 1)
                    beta = self.beta[1] + (self.beta[0] - self.beta[1]) * (1 - progress)
                    loss = loss + self.reg_weight * (1 - (2 * h - 1).abs().pow(beta)).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            return weight_of((rectified_sigmoid(v) >= 0.5).to(weight))
