"""Resize: nearest, linear and cubic, with every coordinate transformation mode but
``tf_crop_and_resize``, computed separably as a gather of taps and a weighted sum.

For each resized axis, an output index ``x`` maps to a coordinate in the input
(``coordinate_transformation_mode``), which picks taps (``mode``, ``nearest_mode``) with
weights; the tables depend only on the sizes, so they are computed once per input shape.
"""
import math
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

from ...operation import Operation
from ..kernels import UnsupportedOperationError, register_kernel
from .common import reader

__all__: List[str] = []

Taps = Tuple[torch.Tensor, Optional[torch.Tensor]]  # indices [out, taps], weights or None

_COORDINATES: Dict[str, Callable[[torch.Tensor, torch.Tensor, int, int], torch.Tensor]] = {
    'half_pixel': lambda x, scale, size, out: (x + 0.5) / scale - 0.5,
    'half_pixel_symmetric': lambda x, scale, size, out: (
        size / 2 * (1 - out / (scale * size)) + (x + 0.5) / scale - 0.5),
    'pytorch_half_pixel': lambda x, scale, size, out: (
        (x + 0.5) / scale - 0.5 if out > 1 else torch.zeros_like(x)),
    'align_corners': lambda x, scale, size, out: (
        x * (size - 1) / (out - 1) if out > 1 else torch.zeros_like(x)),
    'asymmetric': lambda x, scale, size, out: x / scale,
    'tf_half_pixel_for_nn': lambda x, scale, size, out: (x + 0.5) / scale,
}

_TIE_TOLERANCE = 1e-6
"""How far from ``n + 0.5`` a float32 coordinate still counts as a tie of ``round_prefer_*``.

An exact tie can come out of float32 arithmetic an ulp off: the ``asymmetric`` coordinate
``2 * 7 / 4 = 3.5`` of a resize from 7 to 4 is ``2 / float32(4 / 7) = 3.4999998``.
onnxruntime computes the coordinates in float32 too, and takes such values as ties.
"""


def _round_prefer(ceil: bool) -> Callable[[torch.Tensor], torch.Tensor]:
    """Round to the nearest integer; a tie (within :data:`_TIE_TOLERANCE`) goes up or down."""
    def rounding(x: torch.Tensor) -> torch.Tensor:
        low = torch.floor(x)
        tie = (x - low - 0.5).abs() <= _TIE_TOLERANCE
        return torch.where(tie, low + 1 if ceil else low, torch.round(x))
    return rounding


_ROUNDING: Dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    'round_prefer_floor': _round_prefer(ceil=False),
    'round_prefer_ceil': _round_prefer(ceil=True),
    'floor': torch.floor,
    'ceil': torch.ceil,
}


def _nearest_taps(coords: torch.Tensor, size: int, rounding: str, **_) -> Taps:
    index = _ROUNDING[rounding](coords).clamp(0, size - 1).long()
    return index.unsqueeze(1), None


def _linear_taps(coords: torch.Tensor, size: int, **_) -> Taps:
    coords = coords.clamp(0, size - 1)
    low = coords.floor()
    high_weight = coords - low
    index = torch.stack([low, (low + 1).clamp(max=size - 1)], 1).long()
    return index, torch.stack([1 - high_weight, high_weight], 1)


def _cubic_taps(coords: torch.Tensor, size: int, cubic_a: float, exclude_outside: bool,
                **_) -> Taps:
    low = coords.floor()
    t = (coords - low).unsqueeze(1)
    distance = torch.cat([t + 1, t, 1 - t, 2 - t], 1)
    near = ((cubic_a + 2) * distance - (cubic_a + 3)) * distance * distance + 1
    far = ((cubic_a * distance - 5 * cubic_a) * distance + 8 * cubic_a) * distance - 4 * cubic_a
    weights = torch.where(distance <= 1, near, far)
    index = low.long().unsqueeze(1) + torch.arange(-1, 3)
    if exclude_outside:
        weights = weights * ((index >= 0) & (index < size))
        weights = weights / weights.sum(1, keepdim=True)
    return index.clamp(0, size - 1), weights


_TAPS = {'nearest': _nearest_taps, 'linear': _linear_taps, 'cubic': _cubic_taps}


def _output_sizes(sizes_in: Sequence[int], scales: Optional[Sequence[float]],
                  sizes: Optional[Sequence[int]], policy: str) -> Tuple[List[int], List[float]]:
    """The output sizes and scales of the resized axes (``keep_aspect_ratio_policy``)."""
    if sizes is None:
        return [math.floor(size * scale) for size, scale in zip(sizes_in, scales)], list(scales)
    if policy != 'stretch':
        pick = min if policy == 'not_larger' else max
        scale = pick(out / size for out, size in zip(sizes, sizes_in))
        sizes = [int(round(scale * size)) for size in sizes_in]
        return sizes, [scale] * len(sizes)
    return list(sizes), [out / size for out, size in zip(sizes, sizes_in)]


def _resize_axis(x: torch.Tensor, axis: int, taps: Taps) -> torch.Tensor:
    index, weights = taps
    picked = x.index_select(axis, index.reshape(-1))
    if weights is None:
        return picked
    shape = list(x.shape)
    shape[axis:axis + 1] = index.shape
    weights = weights.to(x.dtype if x.is_floating_point() else torch.float32)
    out = (picked.reshape(shape) * weights.reshape(*index.shape, *[1] * (x.dim() - axis - 1)))
    out = out.sum(axis + 1)
    return out if x.is_floating_point() else out.round().to(x.dtype)


@register_kernel('Resize')
def _resize(op: Operation, device: torch.device):
    """Scales (input 2; input 1 in opset 10) or sizes (input 3), optionally per ``axes``."""
    attributes, legacy = op.attributes, op.opset.version < 11
    mode = attributes.get('mode', 'nearest')
    coordinate = attributes.get('coordinate_transformation_mode',
                                'asymmetric' if legacy else 'half_pixel')
    for unsupported, wrong in ((f'mode {mode!r}', mode not in _TAPS),
                               (f'coordinate_transformation_mode {coordinate!r}',
                                coordinate not in _COORDINATES),
                               ('antialias=1', attributes.get('antialias', 0))):
        if wrong:
            raise UnsupportedOperationError(op, unsupported)
    to_coordinates, make_taps = _COORDINATES[coordinate], _TAPS[mode]
    tap_options = dict(rounding=attributes.get('nearest_mode', 'floor' if legacy
                                               else 'round_prefer_floor'),
                       cubic_a=attributes.get('cubic_coeff_a', -0.75),
                       exclude_outside=bool(attributes.get('exclude_outside', 0)))
    policy, axes_attribute = attributes.get('keep_aspect_ratio_policy', 'stretch'), \
        attributes.get('axes')
    scales_of = reader(op, 1 if legacy else 2, convert=lambda t: t.reshape(-1).tolist())
    sizes_of = reader(op, 3)
    plans: Dict[tuple, List[Tuple[int, Taps]]] = {}

    def plan(shape: torch.Size, scales, sizes) -> List[Tuple[int, Taps]]:
        axes = [axis % len(shape) for axis in axes_attribute or range(len(shape))]
        outs, axis_scales = _output_sizes([shape[axis] for axis in axes], scales, sizes, policy)
        steps = []
        for axis, out, scale in zip(axes, outs, axis_scales):
            size = shape[axis]
            if out == size and scale == 1.0 and coordinate != 'tf_half_pixel_for_nn':
                continue
            coords = to_coordinates(torch.arange(out, dtype=torch.float32),
                                    torch.tensor(scale, dtype=torch.float32), size, out)
            index, weights = make_taps(coords, size, **tap_options)
            steps.append((axis, (index.to(device),
                                 None if weights is None else weights.to(device))))
        return steps

    def kernel(*inputs):
        x, scales, sizes = inputs[0], scales_of(inputs) or None, sizes_of(inputs) or None
        key = (tuple(x.shape), tuple(scales or ()), tuple(sizes or ()))
        if key not in plans:
            plans[key] = plan(x.shape, scales, sizes)
        for axis, taps in plans[key]:
            x = _resize_axis(x, axis, taps)
        return x
    return kernel
