"""The percentile observer: the range holds a given percentage of the values seen."""
from typing import Optional, Tuple

import torch

from ...ir import QuantizationProperty, TensorQuantizationConfig
from ...utils.checks import real_number
from .base import register_observer
from .histogram import HistogramObserver, histogram_quantile

__all__ = ['PercentileObserver']

SMALLEST_PERCENTILE = 50.0
"""The smallest ``percentile`` taken: below it the option is a fraction or a mistake."""


@register_observer
class PercentileObserver(HistogramObserver):
    """Clips the rarest values: the range ends at a percentile of the values observed.

    Symmetrical configs get ``[-t, t]`` with ``t`` the ``percentile`` of ``|x|``;
    asymmetrical ones get the ``100 - percentile`` and ``percentile`` percentiles of ``x``.
    Percentiles come from the histogram, interpolated linearly inside their bin, and never
    leave the observed range.

    ``percentile`` is in percent (99.99), not a fraction (PPQ's ``0.9999``), and at least
    50: a range that holds less than half of the values clips most of them, and for an
    asymmetrical config the lower percentile ``100 - p`` would lie above the upper one
    ``p``.  So a value below 50 is a fraction or a typo, never a calibration anyone wants:
    it is refused, and one of at most 1 names its percentage (0.9999: "did you mean
    99.99?") instead of calibrating a range of nearly nothing (0.01 dB SNR).

    Args:
        channel_axis: see :class:`~razorlib.quantization.observers.base.Observer`.
        percentile: the percentage of values the range holds, in ``[50, 100]``.
        bins: see :class:`~razorlib.quantization.observers.histogram.HistogramObserver`.

    Raises:
        TypeError: ``percentile`` is no number, or ``bins`` no integer.
        ValueError: ``percentile`` lies outside ``(0, 100]``, or below 50 (a fraction
            gets the percentage it means), or ``bins`` is odd or below 2.

    Example:
        >>> from razorlib.ir import TensorQuantizationConfig
        >>> observer = PercentileObserver(percentile=99.0)
        >>> observer.observe(torch.cat([torch.linspace(-1.27, 1.27, 999), torch.tensor([50.0])]))
        >>> config = TensorQuantizationConfig()
        >>> observer.render(config)
        >>> round(config.scale.item() * 127, 2)
        1.26
        >>> try:
        ...     PercentileObserver(percentile=0.9999)  # PPQ's fraction
        ... except ValueError as error:
        ...     print(error)
        percentile is in percent, in [50, 100]: got 0.9999, a fraction; did you mean 99.99?
    """
    name = 'percentile'

    def __init__(self, channel_axis: Optional[int] = None, percentile: float = 99.99,
                 bins: int = 4096) -> None:
        real_number(percentile, 'percentile', f'a percentage in [{SMALLEST_PERCENTILE:g}, 100]')
        _check_percentile(percentile)
        super().__init__(channel_axis, bins)
        self.percentile = float(percentile)

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


def _check_percentile(percentile) -> None:
    """Refuse a percentile outside ``(0, 100]``, or below :data:`SMALLEST_PERCENTILE`."""
    if not 0 < percentile <= 100:
        raise ValueError(f'percentile must lie in (0, 100], got {percentile}')
    if percentile < SMALLEST_PERCENTILE:
        wanted = f'percentile is in percent, in [{SMALLEST_PERCENTILE:g}, 100]: got {percentile}'
        if percentile <= 1:  # a fraction, PPQ's convention
            raise ValueError(f'{wanted}, a fraction; did you mean {percentile * 100:.10g}?')
        raise ValueError(f'{wanted}; a range holding less than half of the values clips most '
                         'of them (and an asymmetrical one would end below where it starts)')
