"""ClipEqualization: equalize activation ranges across a ReLU6 (a ``Clip`` from 0).

:class:`~.equalization.LayerwiseEqualization` leaves layer pairs joined by ReLU6 alone:
``clip(s x, 0, 6)`` is not ``s clip(x, 0, 6)`` for every ``x``.  But it is for every
``x <= 6 / s``, and calibration data says how high each channel goes.  A channel whose
pre-clip outputs never exceed ``m < 6`` can be multiplied by up to ``6 / m`` in the first
layer (weights and bias) and divided by it in the second layer's input weights, and the
network computes the same function on every input whose channel stays below ``6 / s``.
MobileNet-style blocks (1x1 expand, ReLU6, depthwise 3x3, ReLU6, 1x1 project) have many
channels that stay far below the clip, while the per-tensor quantizer of the ReLU6 output
is sized by the channels that reach it: the quiet channels get a few of the 127 steps.
Amplified, they use the whole range, and the activation's rounding noise falls where
the signal is small.

The price: an input that drives an amplified channel above its calibrated maximum times
``1 / margin`` is clipped where the FP32 model was not.  The activation quantizer does
not hide that: its per-tensor range is sized by the channels that reach the clip, and a
quiet channel had room below it before it was amplified to ``margin`` of it.  So the
rewritten FP32 graph is the original on data like the calibration batches, and departs
from it on data that goes further (docs/quantization/passes.md measures both on a
MobileNetV2); a lower ``margin`` buys headroom for some of the gain.  And the second
layer's weights for that channel shrink by ``s``, which costs weight precision where the
second layer's weights are quantized per output channel across its inputs (a dense 1x1
conv), but not in a depthwise conv, whose weight channels each have their own scale.
``depthwise_only`` keeps to the pairs where amplifying is free of that cost.
"""
import logging
from typing import Dict, List, Tuple

import torch

from ...ir import BaseGraph, Operation, PassResult, TorchExecutor
from ...registry import PTQ_PASSES
from .base import PTQPass
from .equalization import layer_after, rescale_pair
from .layers import clip_from_zero, is_channel_layer, output_channel_axis, sole_reader

logger = logging.getLogger(__name__)

__all__ = ['ClipEqualization', 'clipped_pairs']


def clipped_pairs(graph: BaseGraph) -> List[Tuple[Operation, Operation, float]]:
    """Every ``(first, second, high)``: a weight layer ``first`` read only by a
    ``Clip(0, high)`` read only by the weight layer ``second`` as its data input, with as
    many input channels as ``first`` has outputs.

    Example:
        >>> import torch
        >>> from razorlib.ir import from_torch
        >>> net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 1), torch.nn.ReLU6(),
        ...                           torch.nn.Conv2d(4, 2, 1))
        >>> graph = from_torch(net, torch.randn(1, 3, 4, 4))
        >>> [(a.type, b.type, high) for a, b, high in clipped_pairs(graph)]
        [('Conv', 'Conv', 6.0)]
    """
    pairs = []
    for first in graph.topological_sort():
        if not is_channel_layer(first):
            continue
        clip = sole_reader(graph, first)
        high = None if clip is None else clip_from_zero(clip)
        if high is None:
            continue
        second = layer_after(graph, first, clip)
        if second is not None:
            pairs.append((first, second, high))
    return pairs


def _is_depthwise(op: Operation) -> bool:
    weight = op.inputs[1].value
    return (op.type == 'Conv' and weight.dim() > 2 and weight.shape[1] == 1
            and op.attributes.get('group', 1) == weight.shape[0])


def _channel_maxima(graph: BaseGraph, layers: List[Operation], batches: list, device
                    ) -> Dict[Operation, torch.Tensor]:
    """The largest output of each channel of ``layers`` over ``batches`` (FP32 graph)."""
    maxima: Dict[Operation, torch.Tensor] = {}

    def record(op, inputs, outputs):
        if op in wanted:
            out = outputs[0].detach()
            axis = output_channel_axis(op) % out.dim()
            peak = out.transpose(0, axis).reshape(out.shape[axis], -1).amax(dim=1).cpu()
            maxima[op] = peak if op not in maxima else torch.maximum(maxima[op], peak)

    wanted = set(layers)
    executor = TorchExecutor(graph, device)
    handle = executor.register_forward_hook(record)
    try:
        with torch.no_grad():
            for batch in batches:
                executor(batch)
    finally:
        handle.remove()
    return maxima


@PTQ_PASSES.register_module(name=['ClipEqualization', 'clip_equalization'])
class ClipEqualization(PTQPass):
    """Amplify the channels that stay below a ReLU6 (see the module docstring).

    Runs on the FP32 graph before quantization (``stage = 'float'``), after BatchNorm is
    folded; reads the calibration batches once to find each channel's largest pre-clip
    output ``m``, then scales it by ``s = min(margin * high / m, max_factor)`` (never
    below 1: channels that reach the clip are left alone, dead ones too).

    Args:
        margin: the fraction of the clip bound an amplified channel's calibrated
            maximum is raised to; below 1 leaves headroom for inputs that go higher.
        max_factor: the largest amplification.
        depthwise_only: amplify only pairs whose second layer is a depthwise conv, where
            shrinking its weights costs no weight precision.

    Example:
        >>> import torch
        >>> from razorlib.ir import TorchExecutor, from_torch
        >>> _ = torch.manual_seed(0)
        >>> net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 1), torch.nn.ReLU6(),
        ...                           torch.nn.Conv2d(4, 4, 3, groups=4))
        >>> with torch.no_grad():
        ...     _ = net[0].weight[1:3].mul_(0.01), net[0].bias[1:3].zero_()  # 2 quiet channels
        >>> batches = [torch.randn(8, 3, 4, 4) for _ in range(4)]
        >>> graph = from_torch(net, batches[0])
        >>> before = [TorchExecutor(graph)(b)[0] for b in batches]
        >>> ClipEqualization(max_factor=1000)(graph, batches).changes
        1
        >>> all(torch.allclose(TorchExecutor(graph)(b)[0], y, atol=1e-5)
        ...     for b, y in zip(batches, before))
        True
        >>> first = next(op for op in graph.topological_sort() if op.type == 'Conv')
        >>> peaks = torch.stack([TorchExecutor(graph)(b, output_names=[first.outputs[0].name])[0]
        ...                      .amax(dim=(0, 2, 3)) for b in batches]).amax(0)
        >>> [round(float(p), 2) for p in peaks]  # each channel's peak: 0.9 * 6, or above
        [5.4, 5.4, 5.4, 5.4]
    """

    stage = 'float'

    def __init__(self, margin: float = 0.9, max_factor: float = 16.0,
                 depthwise_only: bool = False) -> None:
        if not 0 < margin <= 1 or max_factor < 1:
            raise ValueError(f'ClipEqualization: margin must be in (0, 1] and max_factor '
                             f'>= 1, got {margin} and {max_factor}')
        self.margin, self.max_factor, self.depthwise_only = margin, max_factor, depthwise_only

    def call(self, graph: BaseGraph, batches: list, device) -> PassResult:
        """Amplify the quiet channels of every pair of :func:`clipped_pairs`; ``changes``
        counts the pairs with at least one channel amplified."""
        if not batches:
            raise ValueError('ClipEqualization reads calibration batches; none were given')
        pairs = [(a, b, high) for a, b, high in clipped_pairs(graph)
                 if not self.depthwise_only or _is_depthwise(b)]
        maxima = _channel_maxima(graph, [a for a, _, _ in pairs], batches, device)
        changed = 0
        for first, second, high in pairs:
            peak = maxima[first].double()
            scale = torch.ones_like(peak)
            alive = peak > 0
            scale[alive] = (self.margin * high / peak[alive]).clamp(1.0, self.max_factor)
            if bool((scale > 1).any()):
                rescale_pair(first, second, scale)
                changed += 1
        logger.info('ClipEqualization: %d of %d clipped pairs of graph %r amplified', changed,
                    len(pairs), graph.name)
        return PassResult.counted(graph, changed)
