"""The MSE observer: a grid search for the clipping range with the least quantization error."""
from typing import Optional, Tuple

import torch

from ...ir import QuantizationProperty, TensorQuantizationConfig
from ..functional import linear_fake_quantize
from ...utils.checks import integer_number
from .base import range_to_scale_offset, register_observer
from .histogram import HistogramObserver

__all__ = ['MSEObserver']

_ELEMENTS_PER_STEP = 1 << 22


@register_observer
class MSEObserver(HistogramObserver):
    """Picks, among ``grid`` shrunken copies of the observed range, the one whose
    quantize-dequantize round trip has the least mean squared error.

    Candidate ``k`` (1 to ``grid``) is the observed range scaled by ``k / grid``:
    ``[-a, a]`` with ``a = k / grid * max|x|`` for a symmetrical config, ``[k / grid * min,
    k / grid * max]`` for an asymmetrical one.  The error is measured on the histogram:
    each bin's count times the squared error of its centre, with the config's integer
    range and rounding.  Heavy tails are clipped when that costs less than the rounding
    error they would cause.

    Args:
        channel_axis: see :class:`~razorlib.quantization.observers.base.Observer`.
        grid: the number of candidate ranges, an integer of at least 1.
        bins: see :class:`~razorlib.quantization.observers.histogram.HistogramObserver`.

    Raises:
        TypeError: ``grid`` or ``bins`` is no integer.
        ValueError: ``grid`` is below 1, ``bins`` odd or below 2.

    Example:
        >>> from razorlib.ir import TensorQuantizationConfig
        >>> observer = MSEObserver()
        >>> uniform = torch.rand(20000, generator=torch.Generator().manual_seed(0)) - 0.5
        >>> values = -uniform.sign() * torch.log1p(-2 * uniform.abs())  # Laplace
        >>> observer.observe(values)
        >>> config = TensorQuantizationConfig()
        >>> observer.render(config)
        >>> bool(config.scale * 127 < values.abs().max())
        True
    """
    name = 'mse'

    def __init__(self, channel_axis: Optional[int] = None, grid: int = 100,
                 bins: int = 4096) -> None:
        grid = integer_number(grid, 'grid', 'a number of candidate ranges')
        if grid < 1:
            raise ValueError(f'grid must be at least 1, got {grid}')
        super().__init__(channel_axis, bins)
        self.grid = grid

    def _range(self, config: TensorQuantizationConfig) -> Tuple[torch.Tensor, torch.Tensor]:
        histogram = self.histogram
        shrink = torch.arange(1, self.grid + 1, dtype=torch.double) / self.grid
        if QuantizationProperty.SYMMETRICAL in config.policy:
            hi = histogram.magnitude_max[:, None] * shrink
            lo = -hi
        else:
            lo = histogram.min.clamp(max=0.0)[:, None] * shrink
            hi = histogram.max.clamp(min=0.0)[:, None] * shrink
        bins = torch.arange(histogram.bins, dtype=torch.double)
        centres = -histogram.limit[:, None] + (bins + 0.5) * histogram.width[:, None]
        rows_per_step = max(1, _ELEMENTS_PER_STEP // (self.grid * histogram.bins))
        best = torch.cat([
            self._errors(lo[rows], hi[rows], centres[rows], histogram.counts[rows], config)
            .argmin(1) for rows in torch.arange(len(lo)).split(rows_per_step)])
        pick = torch.arange(len(lo))
        return lo[pick, best], hi[pick, best]

    @staticmethod
    def _errors(lo, hi, centres, counts, config) -> torch.Tensor:
        """Squared error per row and candidate, summed over the histogram."""
        scale, offset = range_to_scale_offset(lo, hi, config)
        restored = linear_fake_quantize(centres[:, None, :].float(), scale[..., None],
                                        offset[..., None], config.quant_min, config.quant_max,
                                        config.rounding)
        squared = (centres[:, None, :] - restored.double()).square()
        return (counts[:, None, :].double() * squared).sum(2)
