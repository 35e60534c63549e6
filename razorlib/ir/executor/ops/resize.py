"""Resize: nearest, linear and cubic, with every coordinate transformation mode but
``tf_crop_and_resize``, computed separably as a gather of taps and a weighted sum.

For each resized axis, an output index ``x`` maps to a coordinate in the input
(``coordinate_transformation_mode``), which picks taps (``mode``, ``nearest_mode``) with
weights; the tables depend only on the sizes, so they are computed once per input shape.

The tables follow onnxruntime's CPU kernel operation by operation, in numpy float32 (and
float64 where it uses double), because a nearest tap flips on the last bit of a
coordinate.  Where onnxruntime departs from the ONNX reference implementation, it is
followed, as it is what the exported models run on; each such place says so.
"""
import math
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from ...operation import Operation
from ..kernels import UnsupportedOperationError, register_kernel
from .common import reader

__all__: List[str] = []

Taps = Tuple[np.ndarray, Optional[np.ndarray]]  # indices [out, taps], weights or None
DeviceTaps = Tuple[torch.Tensor, Optional[torch.Tensor]]  # the same, on the kernel's device
Coordinates = Callable[[np.ndarray, np.float32, int, int], np.ndarray]

_HALF, _ONE = np.float32(0.5), np.float32(1)


def _half_pixel_symmetric(x: np.ndarray, scale: np.float32, size: int, out: int) -> np.ndarray:
    """onnxruntime computes the offset in float32 and the rest in float64 (its ``0.5`` there
    is a double literal), rounding to float32 at the end; in float32 throughout, a
    coordinate of a floor or ceil tap can land on the other side of an integer."""
    length = np.float32(size)
    offset = length / np.float32(2) * (_ONE - np.float32(out) / (scale * length))
    centres = (x.astype(np.float64) + 0.5) / np.float64(scale) - 0.5
    return (np.float64(offset) + centres).astype(np.float32)


_COORDINATES: Dict[str, Coordinates] = {
    'half_pixel': lambda x, scale, size, out: (x + _HALF) / scale - _HALF,
    'half_pixel_symmetric': _half_pixel_symmetric,
    'pytorch_half_pixel': lambda x, scale, size, out: (
        (x + _HALF) / scale - _HALF if out > 1 else np.zeros_like(x)),
    'align_corners': lambda x, scale, size, out: (
        x * np.float32(size - 1) / np.float32(out - 1) if out > 1 else np.zeros_like(x)),
    'asymmetric': lambda x, scale, size, out: x / scale,
    'tf_half_pixel_for_nn': lambda x, scale, size, out: (x + _HALF) / scale,
}


_TIE_TOLERANCE = 1e-6
"""How far from ``n + 0.5`` a float32 coordinate still counts as a tie of ``round_prefer_*``.

onnxruntime (1.32) takes a coordinate whose fraction is within 1e-6 of a half as a tie
(its issue 28291): a tie computed in float32 often comes out an ulp off, as the
``asymmetric`` coordinate ``2 / float32(4 / 7) = 3.4999998`` of a resize from 7 to 4.
"""


def _round_prefer(ceil: bool) -> Callable[[np.ndarray, np.float32], np.ndarray]:
    """Round to the nearest integer; a tie (within :data:`_TIE_TOLERANCE`) goes up or down."""
    def rounding(coords: np.ndarray, scale: np.float32) -> np.ndarray:
        exact = coords.astype(np.float64)  # float32 values: exact sums and differences
        low = np.floor(exact)
        tie = np.abs(exact - low - 0.5) <= _TIE_TOLERANCE
        return np.where(tie, low + 1 if ceil else low, np.floor(exact + 0.5))
    return rounding


def _round_simple(coords: np.ndarray, scale: np.float32) -> np.ndarray:
    """Opset 10, which has no ``nearest_mode``: onnxruntime rounds up when shrinking and
    truncates when enlarging (the ONNX reference floors both ways)."""
    return np.ceil(coords) if scale < 1 else np.trunc(coords)


_ROUNDING: Dict[str, Callable[[np.ndarray, np.float32], np.ndarray]] = {
    'round_prefer_floor': _round_prefer(ceil=False),
    'round_prefer_ceil': _round_prefer(ceil=True),
    'floor': lambda coords, scale: np.floor(coords),
    'ceil': lambda coords, scale: np.ceil(coords),
    'simple': _round_simple,
}


def _nearest_taps(coords: np.ndarray, size: int, scale: np.float32, rounding: str,
                  **_) -> Taps:
    index = np.clip(_ROUNDING[rounding](coords, scale), 0, size - 1).astype(np.int64)
    return index[:, None], None


def _linear_taps(coords: np.ndarray, size: int, **_) -> Taps:
    """The two neighbours, each weighted by the distance to the other one; one pixel twice,
    at half weight, at the last one."""
    coords = np.clip(coords, np.float32(0), np.float32(size - 1))
    low = np.minimum(coords.astype(np.int64), size - 1)
    high = np.minimum(low + 1, size - 1)
    weights = np.stack([np.abs(coords - high.astype(np.float32)),
                        np.abs(coords - low.astype(np.float32))], 1)
    weights[low == high] = _HALF
    return np.stack([low, high], 1), weights


def _cubic_taps(coords: np.ndarray, size: int, cubic_a: float, exclude_outside: bool,
                **_) -> Taps:
    """Keys' kernel on the four neighbours; an index outside the input repeats the edge, or
    (``exclude_outside``) weighs nothing, the others renormalised."""
    low = np.floor(coords)
    t = (coords - low)[:, None]
    a = np.float32(cubic_a)
    near = np.concatenate([t, _ONE - t], 1)
    far = np.concatenate([t + _ONE, np.float32(2) - t], 1)
    near = ((a + 2) * near - (a + 3)) * near * near + 1
    far = ((a * far - 5 * a) * far + 8 * a) * far - 4 * a
    weights = np.stack([far[:, 0], near[:, 0], near[:, 1], far[:, 1]], 1)
    index = low.astype(np.int64)[:, None] + np.arange(-1, 3)
    if exclude_outside:
        weights = weights * ((index >= 0) & (index < size))
        weights = weights / weights.sum(1, keepdims=True)
    return np.clip(index, 0, size - 1), weights


_TAPS = {'nearest': _nearest_taps, 'linear': _linear_taps, 'cubic': _cubic_taps}


def _output_sizes(sizes_in: Sequence[int], scales: Optional[Sequence[float]],
                  sizes: Optional[Sequence[int]], policy: str
                  ) -> Tuple[List[int], List[np.float32]]:
    """The output sizes and float32 scales of the resized axes (``keep_aspect_ratio_policy``).

    In float32 like onnxruntime: an output size is ``size * scale`` truncated, and a scale
    from ``sizes`` is ``out / size``.  The ONNX reference multiplies in float64, so that
    ``3 * float32(5 / 3) = 4.9999998`` gives 4 there and 5 in onnxruntime.  A policy's size
    is rounded half away from zero (``std::round``), not to even.
    """
    if sizes is None:
        scales = [np.float32(scale) for scale in scales]
        return [int(scale * np.float32(size)) for size, scale in zip(sizes_in, scales)], scales
    scales = [np.float32(out) / np.float32(size) for out, size in zip(sizes, sizes_in)]
    if policy == 'stretch':
        return list(sizes), scales
    scale = (min if policy == 'not_larger' else max)(scales)
    return ([math.floor(float(scale * np.float32(size)) + 0.5) for size in sizes_in],
            [scale] * len(scales))


def _resize_axis(x: torch.Tensor, axis: int, taps: DeviceTaps) -> torch.Tensor:
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
    """Scales (input 2; input 1 in opset 10) or sizes (input 3), optionally per ``axes``.

    Like onnxruntime, the input comes back unchanged when no size changes, even where a
    scale is not 1, and an axis of scale 1 is copied whatever the coordinate mode (the ONNX
    reference would shift it by half a pixel in ``tf_half_pixel_for_nn``).
    """
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
    tap_options = dict(rounding='simple' if legacy else
                       attributes.get('nearest_mode', 'round_prefer_floor'),
                       cubic_a=attributes.get('cubic_coeff_a', -0.75),
                       exclude_outside=bool(attributes.get('exclude_outside', 0)))
    policy, axes_attribute = attributes.get('keep_aspect_ratio_policy', 'stretch'), \
        attributes.get('axes')
    scales_of = reader(op, 1 if legacy else 2, convert=lambda t: t.reshape(-1).tolist())
    sizes_of = reader(op, 3)
    plans: Dict[tuple, List[Tuple[int, DeviceTaps]]] = {}

    def plan(shape: torch.Size, scales, sizes) -> List[Tuple[int, DeviceTaps]]:
        axes = [axis % len(shape) for axis in axes_attribute or range(len(shape))]
        outs, axis_scales = _output_sizes([shape[axis] for axis in axes], scales, sizes, policy)
        if all(out == shape[axis] for axis, out in zip(axes, outs)):
            return []
        steps = []
        for axis, out, scale in zip(axes, outs, axis_scales):
            if scale == 1:
                continue
            coords = to_coordinates(np.arange(out, dtype=np.float32), scale, shape[axis], out)
            index, weights = make_taps(coords, shape[axis], scale=scale, **tap_options)
            steps.append((axis, tuple(None if table is None else torch.from_numpy(table).to(device)
                                      for table in (index, weights))))
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
