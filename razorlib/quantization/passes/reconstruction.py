"""ActivationScaleSearch: choose each activation scale for the graph's output error.

An activation observer chooses the scale of its tensor for that tensor's own error
(``mse``: the scale that minimizes its own squared quantization error), but what counts
is the error at the graph's output: a residual Add sums two quantized branches whose
errors add, a pooling averages a quantized map, and the layers after a tensor amplify
its clipping error and its rounding noise in different proportions.  This pass revisits
every activation scale (one per dominance set), in topological order, and multiplies it
by the factor of a small grid that minimizes the noise-to-signal ratio of the quantized
graph's outputs against the FP32 graph's on the calibration batches, every other scale
as it stands: coordinate descent on the graph-output reconstruction error, the objective
of BRECQ (Li et al. 2021) with the whole graph as one block, searched rather than
learned.  (LSQ's straight-through gradient of a scale, tried first, is noise at int8
resolution: on ResNet-18 it made the output error worse at each learning rate tried,
1e-2 to 1e-3.)
Later rounds search a finer grid around the scales found.  The grid contains 1, so no
step makes the calibration error larger.  Weights and their scales stay as they are;
biases follow (input scale x weight scale).  Each candidate costs one quantized run of
the graph on the search batches.
"""
import logging
from typing import Dict, List, Optional, Sequence

import torch

from ...ir import BaseGraph, PassResult, TensorQuantizationConfig
from ...registry import PTQ_PASSES
from ...utils.checks import integer_number
from ..analysis import SNRMeter
from ..executor import QuantExecutor
from ..lsq import follow_passive_scales
from ..state import dequantized, quantable_operations
from .base import PTQPass, name_list

logger = logging.getLogger(__name__)

__all__ = ['ActivationScaleSearch', 'activation_roots']


def activation_roots(graph: BaseGraph) -> Dict[str, TensorQuantizationConfig]:
    """The dominance-set roots of the graph's activations quantized at run time, by name.

    An activation is a quantized tensor that is no parameter (data a layer reads or
    writes); passive configs (biases) derive their scales and are left out.  The key is
    ``'<op>:<in|out><index>'`` of the set's first config in topological order that
    quantizes at run time (a conv's output overlapped by its fused ReLU is the ReLU's).

    Example:
        >>> import torch
        >>> from razorlib.quantization import quantize_torch_model
        >>> net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU())
        >>> x = torch.randn(2, 3, 8, 8)
        >>> graph = quantize_torch_model(net, [x], x, progress=False)
        >>> sorted(activation_roots(graph))
        ['node_conv2d:in0', 'node_relu:out0']
    """
    roots: Dict[str, TensorQuantizationConfig] = {}
    seen = set()
    for op in quantable_operations(graph):
        for side, configs, variables in (('in', op.input_quant_config, op.inputs),
                                         ('out', op.output_quant_config, op.outputs)):
            for index, (config, var) in enumerate(zip(configs, variables)):
                root = config.dominated_by
                if (var.is_parameter or not config.state.is_activated or config.state.is_passive
                        or root in seen):
                    continue
                seen.add(root)
                roots[f'{op.name}:{side}{index}'] = root
    return roots


def _factor_grid(span: float, points: int) -> torch.Tensor:
    """``points`` factors from ``1 / span`` to ``span``, evenly spaced in log, 1 included."""
    exponents = torch.linspace(-1.0, 1.0, points, dtype=torch.float64)
    return torch.tensor(span, dtype=torch.float64).pow(exponents)


@PTQ_PASSES.register_module(name=['ActivationScaleSearch', 'activation_scale_search'])
class ActivationScaleSearch(PTQPass):
    """Search every activation scale against the graph's FP32 output (module docstring).

    Runs after calibration (``stage = 'calibrated'``).  List it after ``AdaRound`` (the
    search then sees the weights as they will run: on ResNet-18 this order did better on
    held-out images than searching first and rounding for the scales found) and before
    ``BiasCorrection`` (which removes the mean shift left with the scales found); a
    last fine search after it (``spans=(1.09, )``) revisits the scales with the corrected
    biases, as ``benchmarks/ptq_passes.py`` does.

    Args:
        spans: one entry per round: the grid of that round runs from ``1 / span`` to
            ``span`` times the scale found so far.
        points: factors per grid (odd, so 1 is one of them).
        steps: how many of the batches to search on (None: all).
        scales: the keys of :func:`activation_roots` to search (None: all).

    Example:
        >>> import torch
        >>> from razorlib.quantization import QuantExecutor, quantize_torch_model, snr_db
        >>> _ = torch.manual_seed(0)
        >>> net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
        ...                           torch.nn.Linear(32, 4))
        >>> batches = [torch.randn(64, 16) for _ in range(4)]
        >>> graph = quantize_torch_model(net, batches, batches[0], progress=False)
        >>> def snr():
        ...     with torch.no_grad():
        ...         return snr_db(net(batches[0]), QuantExecutor(graph)(batches[0])[0])
        >>> before = snr()
        >>> result = ActivationScaleSearch()(graph, batches)
        >>> errors = graph.extension_attrib['activation_scale_search']
        >>> result.changes > 0, errors['after'] < errors['before'], snr() > before
        (True, True, True)
    """

    def __init__(self, spans: Sequence[float] = (2.0, 1.19, 1.09), points: int = 9,
                 steps: Optional[int] = None, scales: Optional[Sequence[str]] = None) -> None:
        if not spans or any(span <= 1 for span in spans) or points < 3 or points % 2 == 0:
            raise ValueError(f'ActivationScaleSearch: spans must be > 1 (at least one) and '
                             f'points odd and >= 3, got {spans} and {points}')
        if steps is not None:
            steps = integer_number(steps, 'ActivationScaleSearch: steps', 'or None', minimum=1)
        self.spans, self.points, self.steps = tuple(spans), points, steps
        self.scales = name_list(scales, 'ActivationScaleSearch: scales', 'scale')

    def call(self, graph: BaseGraph, batches: list, device) -> PassResult:
        """Search the scales; ``changes`` counts those that moved, and
        ``graph.extension_attrib['activation_scale_search']`` has the search batches'
        noise-to-signal ratios ``before`` and ``after`` and each scale's ``factors``."""
        batches = batches[:self.steps]
        if not batches:
            raise ValueError('ActivationScaleSearch needs calibration batches; got none')
        roots = self._roots(graph)
        executor = QuantExecutor(graph, device)
        with dequantized(graph), torch.no_grad():
            targets = [executor(batch) for batch in batches]
        before = best = self._error(executor, batches, targets)
        initial = {key: root.scale.clone() for key, root in roots.items()}
        for span in self.spans:
            for key, root in roots.items():
                best = self._search(graph, executor, root, _factor_grid(span, self.points),
                                    batches, targets, best)
        factors = {key: float((root.scale / initial[key]).mean()) for key, root in roots.items()}
        graph.extension_attrib['activation_scale_search'] = dict(before=before, after=best,
                                                                 factors=factors)
        logger.info('ActivationScaleSearch: graph %r, noise/signal %.4g -> %.4g', graph.name,
                    before, best)
        return PassResult.counted(graph, sum(factor != 1.0 for factor in factors.values()))

    def _roots(self, graph: BaseGraph) -> Dict[str, TensorQuantizationConfig]:
        roots = activation_roots(graph)
        if self.scales is None:
            return roots
        missing = sorted(set(self.scales) - set(roots))
        if missing:
            raise KeyError(f'ActivationScaleSearch: graph {graph.name!r} has no activation '
                           f'scale {missing}; it has {sorted(roots)}')
        return {key: roots[key] for key in self.scales}

    def _search(self, graph: BaseGraph, executor: QuantExecutor, root: TensorQuantizationConfig,
                grid: torch.Tensor, batches: list, targets: List[List[torch.Tensor]],
                best: float) -> float:
        """Set ``root`` to the factor of ``grid`` with the smallest output error."""
        start = root.scale
        chosen = start
        for factor in grid.tolist():
            if factor == 1.0:
                continue
            root.scale = start * factor
            follow_passive_scales(graph)
            error = self._error(executor, batches, targets)
            if error < best:
                best, chosen = error, root.scale
        root.scale = chosen
        follow_passive_scales(graph)
        return best

    @staticmethod
    def _error(executor: QuantExecutor, batches: list,
               targets: List[List[torch.Tensor]]) -> float:
        """The quantized graph's noise-to-signal ratio over every output and batch."""
        meter = SNRMeter()
        with torch.no_grad():
            for batch, target in zip(batches, targets):
                for reference, output in zip(target, executor(batch)):
                    meter.update(reference, output)
        return meter.noise / max(meter.signal, 1e-30)
