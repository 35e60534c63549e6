"""The KL observer: TensorRT's entropy calibration, made to hold on any distribution.

TensorRT's recipe: the histogram of ``|x|`` is cut at every candidate bin ``i`` from
``levels`` up to the last non-empty bin.  The reference ``P`` is the first ``i`` bins with
everything beyond added into bin ``i - 1``; the candidate ``Q`` spreads the first ``i``
bins (without that tail) over ``levels`` quantization levels, each level's count shared
evenly among the bins where ``P`` is not empty (``Q`` is floored at 1e-8 where ``P`` has
mass that it lacks); the threshold is the ``i`` of least ``KL(P || Q)``.

That argmin fails three ways, each seen on trained digits CNNs (17 gray levels in):

- A distribution with few distinct values reaches divergence 0 at a threshold that clips
  nearly everything: the clipped mass folds into a bin alone in its level, and the
  renormalized ``P`` and ``Q`` are the same single spike.  Here ``Q`` is not
  renormalized (both are over the total count), so a divergence also carries
  ``-log(1 - clipped share)``.
- A divergence estimated from ``N`` counts exceeds the true one by about
  ``(occupied bins - occupied levels) / 2N`` (Miller-Madow), more for long thresholds
  (fewer, wider levels): uncorrected, the search favours clipping, the more the fewer
  the counts.  Each divergence is corrected.
- Where the divergence is flat, its argmin is noise: sampling noise (standard error by
  the delta method, ``sqrt((E_P[log^2(P/Q)] - KL^2) / N)``) and aliasing (spikes of
  repeated values cross level boundaries from one candidate to the next).  The curve is
  smoothed by a running median over 1/32 of the candidates; every threshold whose
  smoothed divergence lies within the noise of the minimum (the standard error or the
  curve's jitter between neighbouring candidates, whichever is larger) is as good, and
  among them the one of least squared quantization error wins.

The first bin (the values nearest zero) stays out of the search: after a ReLU it holds
the exact zeros, which quantize exactly at any threshold but, as one spike spread over a
level's bins, would pull the threshold far below the bulk of the distribution.
"""
from typing import Tuple

import torch

from ...ir import QuantizationProperty, TensorQuantizationConfig
from .base import register_observer
from .histogram import HistogramObserver

__all__ = ['KLObserver', 'kl_threshold_bin']

_CANDIDATES_PER_STEP = 128
_FLOOR = 1e-8
_TIE = 1e-9
_SMOOTHING = 64
"""The running median spans ``2 * bins // _SMOOTHING + 1`` candidates."""
_MAD_TO_SIGMA = 1 / (0.6745 * 2**0.5)
"""Noise sigma from the median |difference| of neighbouring divergences (normal noise)."""


def kl_threshold_bin(counts: torch.Tensor, levels: int) -> int:
    """The number of ``|x|`` bins to keep: least squared error among the thresholds of
    least KL divergence (see the module).

    Args:
        counts: a histogram of ``|x|``, 1-D.
        levels: the number of quantization levels for ``|x|`` (128 for int8).

    Returns:
        A bin count up to the last non-empty bin: that one when nothing is clipped, and
        always when the non-empty bins fit in ``levels``; 0 for an empty histogram.

    Example:
        >>> bell = torch.exp(-torch.linspace(0, 8, 300) ** 2 / 2) * 1e4
        >>> counts = torch.cat([bell.round(), torch.zeros(1747), torch.ones(1)])
        >>> 128 <= kl_threshold_bin(counts, 128) < 300
        True
    """
    counts = counts.double()
    occupied = counts.nonzero()
    num_bins = int(occupied[-1]) + 1 if len(occupied) else 0
    if num_bins <= levels:
        return num_bins
    counts = counts[:num_bins]
    bins = torch.arange(num_bins)
    tail = counts.sum() - counts.cumsum(0)
    stops = torch.arange(levels, num_bins + 1)
    divergence, error = (torch.cat(parts) for parts in zip(*(
        _divergences(counts[:int(step[-1])], tail, bins[:int(step[-1])], step, levels)
        for step in stops.split(_CANDIDATES_PER_STEP))))
    smooth = _running_median(divergence, max(1, num_bins // _SMOOTHING))
    best = int(smooth.argmin())
    jitter = _MAD_TO_SIGMA * float(divergence.diff().abs().median())
    acceptable = smooth <= smooth[best] + max(float(error[best]), jitter) + _TIE
    squared = _squared_errors(counts, stops, levels).masked_fill(~acceptable, float('inf'))
    return int(stops[squared.argmin()])


def _squared_errors(counts, stops, levels) -> torch.Tensor:
    """Per candidate: the squared error of quantizing the histogram, in bin widths.

    Values sit at their bins' centres; those kept are rounded to ``levels`` steps
    (``step^2 / 12`` each), those beyond the threshold are clipped (``(x - t)^2`` each).
    """
    centres = torch.arange(len(counts), dtype=torch.double) + 0.5
    beyond = [torch.cat([(counts * centres**power).flip(0).cumsum(0).flip(0),
                         torch.zeros(1, dtype=torch.double)])[stops] for power in range(3)]
    threshold = stops.double()
    clipped = beyond[2] - 2 * threshold * beyond[1] + threshold.square() * beyond[0]
    step = threshold / (levels - 1)
    return (counts.sum() - beyond[0]) * step.square() / 12 + clipped


def _running_median(values: torch.Tensor, half: int) -> torch.Tensor:
    """The median of each value and the ``half`` values on either side (edges repeated)."""
    padded = torch.cat([values[:1].expand(half), values, values[-1:].expand(half)])
    return padded.unfold(0, 2 * half + 1, 1).median(1).values


def _divergences(counts, tail, bins, stops, levels) -> Tuple[torch.Tensor, torch.Tensor]:
    """Per candidate number of kept bins in ``stops``: the bias-corrected ``KL(P || Q)``
    and its standard error (see the module)."""
    rows = torch.arange(len(stops))
    kept = bins[None, :] < stops[:, None]
    p = torch.where(kept, counts, 0.0)
    p[rows, stops - 1] += tail[stops - 1]
    level = torch.where(kept, bins[None, :] * levels // stops[:, None], levels)
    level_sums = torch.zeros(len(stops), levels + 1, dtype=torch.double)
    level_sums.scatter_add_(1, level, torch.where(kept, counts, 0.0))
    level_occupied = torch.zeros_like(level_sums).scatter_add_(1, level, (p > 0).double())
    spread = level_sums.gather(1, level) / level_occupied.gather(1, level).clamp(min=1)
    total = p.sum(1)
    p, q = p / total[:, None], torch.where(p > 0, spread, 0.0) / total[:, None]
    log_ratio = torch.where(p > 0, torch.log(p / q.clamp(min=_FLOOR)), 0.0)
    divergence = (p * log_ratio).sum(1)
    variance = ((p * log_ratio.square()).sum(1) - divergence.square()).clamp(min=0) / total
    bias = ((p > 0).sum(1) - (level_occupied[:, :levels] > 0).sum(1)) / (2 * total)
    return divergence - bias, variance.sqrt()


@register_observer
class KLObserver(HistogramObserver):
    """Entropy calibration: a symmetric threshold that keeps the distribution (least KL
    divergence, made robust as the module describes).

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
        counts = histogram.magnitude_counts()
        counts[:, 0] = 0
        kept = torch.tensor([kl_threshold_bin(row, levels) if row.any() else len(row)
                             for row in counts], dtype=torch.double)
        threshold = torch.minimum(kept * histogram.width, histogram.magnitude_max)
        if QuantizationProperty.SYMMETRICAL in config.policy:
            return -threshold, threshold
        return torch.maximum(-threshold, histogram.min), torch.minimum(threshold, histogram.max)
