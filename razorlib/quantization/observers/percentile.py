"""The percentile observer: the range holds a given percentage of the values seen."""
from typing import Optional, Tuple

import torch

from ...ir import QuantizationProperty, TensorQuantizationConfig
from .base import register_observer
from .histogram import HistogramObserver, histogram_quantile

__all__ = ['PercentileObserver']


@register_observer
class PercentileObserver(HistogramObserver):
    """Clips the rarest values: the range ends at a percentile of the values observed.

    Symmetrical configs get ``[-t, t]`` with ``t`` the ``percentile`` of ``|x|``;
    asymmetrical ones get the ``100 - percentile`` and ``percentile`` percentiles of ``x``.
    Percentiles come from the histogram, interpolated linearly inside their bin, and never
    leave the observed range.

    Args:
        channel_axis: see :class:`~razorlib.quantization.observers.base.Observer`.
        percentile: the percentage of values the range holds, in ``(0, 100]``.
        bins: see :class:`~razorlib.quantization.observers.histogram.HistogramObserver`.

    Example:
        >>> from razorlib.ir import TensorQuantizationConfig
        >>> observer = PercentileObserver(percentile=99.0)
        >>> observer.observe(torch.cat([torch.linspace(-1.27, 1.27, 999), torch.tensor([50.0])]))
        >>> config = TensorQuantizationConfig()
        >>> observer.render(config)
        >>> round(config.scale.item() * 127, 2)
        1.26
    """
    name = 'percentile'

    def __init__(self, channel_axis: Optional[int] = None, percentile: float = 99.99,
                 bins: int = 4096) -> None:
        if not 0 < percentile <= 100:
            raise ValueError(f'percentile must lie in (0, 100], got {percentile}')
        super().__init__(channel_axis, bins)
        self.percentile = percentile

    def _range(self, config: TensorQuantizationConfig) -> Tuple[torch.Tensor, torch.Tensor]:
        histogram, share = self.histogram, self.percentile / 100
        if QuantizationProperty.SYMMETRICAL in config.policy:
            threshold = histogram_quantile(histogram.magnitude_counts(),
                                           torch.zeros_like(histogram.limit), histogram.width,
                                           share)
            threshold = torch.minimum(threshold, histogram.magnitude_max)
            return -threshold, threshold
        start = -histogram.limit
        lo = histogram_quantile(histogram.counts, start, histogram.width, 1 - share)
        hi = histogram_quantile(histogram.counts, start, histogram.width, share)
        return torch.maximum(lo, histogram.min), torch.minimum(hi, histogram.max)
