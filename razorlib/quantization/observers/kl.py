"""The KL observer: TensorRT's entropy calibration, a threshold that keeps the distribution.

The histogram of ``|x|`` (2048 bins by default) is cut at every candidate bin ``i`` from
``levels`` on.  The reference distribution ``P`` is the first ``i`` bins with everything
beyond added into bin ``i - 1``; the candidate ``Q`` spreads the first ``i`` bins over
``levels`` quantization levels: each level's count is shared evenly among the bins where
``P`` is not empty.  Where ``P`` has mass that ``Q`` lacks (the clipped tail landing in an
empty level), ``Q`` is floored at 1e-8 rather than making the divergence infinite.  The
threshold is the edge of the bin ``i`` that minimizes ``KL(P || Q)``.  The observer leaves
the first bin (the values nearest zero) out of the search: after a ReLU it holds the exact
zeros, which quantize exactly at any threshold but, as one spike spread over a level's
bins, would pull the threshold far below the bulk of the distribution.
"""
from typing import Tuple

import torch

from ...ir import QuantizationProperty, TensorQuantizationConfig
from .base import register_observer
from .histogram import HistogramObserver

__all__ = ['KLObserver', 'kl_threshold_bin']

_CANDIDATES_PER_STEP = 128
_FLOOR = 1e-8


def kl_threshold_bin(counts: torch.Tensor, levels: int) -> int:
    """The number of ``|x|`` bins to keep, minimizing the KL divergence (see the module).

    Args:
        counts: a histogram of ``|x|``, 1-D.
        levels: the number of quantization levels for ``|x|`` (128 for int8).

    Returns:
        A bin count in ``[levels, len(counts)]``; ``len(counts)`` when nothing is clipped.

    Example:
        >>> bell = torch.exp(-torch.linspace(0, 8, 300) ** 2 / 2) * 1e4
        >>> counts = torch.cat([bell.round(), torch.zeros(1747), torch.ones(1)])
        >>> 128 <= kl_threshold_bin(counts, 128) < 300
        True
    """
    counts = counts.double()
    num_bins = counts.numel()
    if num_bins <= levels:
        return num_bins
    bins = torch.arange(num_bins)
    tail = counts.sum() - counts.cumsum(0)
    best_bin, best_divergence = num_bins, float('inf')
    for first in range(levels, num_bins + 1, _CANDIDATES_PER_STEP):
        stops = torch.arange(first, min(first + _CANDIDATES_PER_STEP, num_bins + 1))
        width = int(stops[-1])
        divergence = _divergences(counts[:width], tail, bins[:width], stops, levels)
        step_best = int(divergence.argmin())
        if divergence[step_best] < best_divergence:
            best_bin, best_divergence = int(stops[step_best]), float(divergence[step_best])
    return best_bin


def _divergences(counts, tail, bins, stops, levels) -> torch.Tensor:
    """``KL(P || Q)`` for each candidate number of kept bins in ``stops``."""
    rows = torch.arange(len(stops))
    kept = bins[None, :] < stops[:, None]
    p = torch.where(kept, counts, 0.0)
    p[rows, stops - 1] += tail[stops - 1]
    level = torch.where(kept, bins[None, :] * levels // stops[:, None], levels)
    level_sums = torch.zeros(len(stops), levels + 1, dtype=torch.double)
    level_sums.scatter_add_(1, level, torch.where(kept, counts, 0.0))
    level_occupied = torch.zeros_like(level_sums).scatter_add_(1, level, (p > 0).double())
    spread = level_sums.gather(1, level) / level_occupied.gather(1, level).clamp(min=1)
    q = torch.where(p > 0, spread, 0.0)
    p = p / p.sum(1, keepdim=True)
    q = q / q.sum(1, keepdim=True).clamp(min=_FLOOR)
    terms = torch.where(p > 0, p * torch.log(p / q.clamp(min=_FLOOR)), 0.0)
    return terms.sum(1)


@register_observer
class KLObserver(HistogramObserver):
    """Entropy calibration (TensorRT's): a symmetric threshold that minimizes KL divergence.

    The levels for ``|x|`` are ``quant_max + 1`` for a symmetrical config (128 for int8)
    and half the integer range for an asymmetrical one, whose range is then
    ``[-t, t]`` cut to the observed range.

    Args:
        channel_axis: see :class:`~razorlib.quantization.observers.base.Observer`.
        bins: see :class:`~razorlib.quantization.observers.histogram.HistogramObserver`;
            the default gives 2048 bins of ``|x|``.

    Example:
        >>> from razorlib.ir import TensorQuantizationConfig
        >>> observer = KLObserver()
        >>> gaussian = torch.randn(20000, generator=torch.Generator().manual_seed(0))
        >>> observer.observe(torch.cat([gaussian, torch.tensor([100.0])]))
        >>> config = TensorQuantizationConfig()
        >>> observer.render(config)
        >>> 2.0 < config.scale.item() * 127 < 20.0
        True
    """
    name = 'kl'

    def _range(self, config: TensorQuantizationConfig) -> Tuple[torch.Tensor, torch.Tensor]:
        histogram = self.histogram
        if QuantizationProperty.SYMMETRICAL in config.policy:
            levels = config.quant_max + 1
        else:
            levels = (config.quant_max - config.quant_min + 1) // 2
        # Bin 0 goes out of the search: it holds the exact zeros of a ReLU output (often
        # half the values), which quantize exactly at every threshold; spread over a
        # level's bins in Q, that spike made the search favour short thresholds.
        counts = histogram.magnitude_counts()[:, 1:]
        kept = torch.tensor([kl_threshold_bin(row, levels) + 1 if row.any() else len(row) + 1
                             for row in counts], dtype=torch.double)
        threshold = torch.minimum(kept * histogram.width,
                                  histogram.magnitude_max)
        if QuantizationProperty.SYMMETRICAL in config.policy:
            return -threshold, threshold
        return torch.maximum(-threshold, histogram.min), torch.minimum(threshold, histogram.max)
