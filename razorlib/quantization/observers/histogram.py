"""Histograms for the observers that look at a distribution (percentile, kl, mse).

:class:`SymmetricHistogram` counts values per channel in equal bins over
``[-limit, limit]``.  The limit starts at the first batch's largest magnitude and, when a
later batch goes beyond it, grows by a whole factor ``k``: each old bin then lies inside
one new bin, so re-binning only adds counts together and stays exact.  The bins mirror
each other around 0 (``[jw, (j+1)w)`` and ``(-(j+1)w, -jw]``), so ``x`` and ``-x`` share
a bin of ``|x|`` even when the values lie on a grid (an image's gray levels).  Memory is
``channels x bins`` counts, whatever the number of batches.
"""
from typing import Optional

import torch

from ...utils.checks import integer_number
from .base import Observer

__all__ = ['HistogramObserver', 'SymmetricHistogram', 'histogram_quantile']

_TINY = 1e-12


def histogram_quantile(counts: torch.Tensor, start: torch.Tensor, width: torch.Tensor,
                       quantile: float) -> torch.Tensor:
    """Per row, the value below which ``quantile`` of the counts lie, interpolated in its bin.

    Args:
        counts: ``rows x bins`` counts.
        start: the left edge of bin 0, per row.
        width: the bin width, per row.
        quantile: in ``[0, 1]``.

    Returns:
        One value per row, float64.

    Example:
        >>> histogram_quantile(torch.tensor([[1, 1, 2]]), torch.tensor([0.0]),
        ...                    torch.tensor([1.0]), 0.75)
        tensor([2.5000], dtype=torch.float64)
    """
    cdf = counts.double().cumsum(1)
    target = quantile * cdf[:, -1:]
    index = torch.searchsorted(cdf, target).clamp(max=counts.shape[1] - 1)
    before = torch.where(index > 0, cdf.gather(1, (index - 1).clamp(min=0)), 0.0)
    in_bin = counts.double().gather(1, index)
    fraction = torch.where(in_bin > 0, (target - before) / in_bin.clamp(min=1), 0.0)
    return (start.double() + (index.squeeze(1) + fraction.squeeze(1)) * width.double())


class SymmetricHistogram:
    """Per-channel counts in ``bins`` equal bins over ``[-limit, limit]``, with exact growth.

    Args:
        bins: the number of bins, an even integer (bin ``bins // 2`` starts at 0).

    Raises:
        TypeError: ``bins`` is no integer.
        ValueError: ``bins`` is odd or below 2.

    Example:
        >>> histogram = SymmetricHistogram(bins=4)
        >>> histogram.add(torch.tensor([[-1.0, 0.2, 0.6, 1.0]]))
        >>> histogram.counts, histogram.limit
        (tensor([[1, 0, 1, 2]]), tensor([1.], dtype=torch.float64))
        >>> histogram.add(torch.tensor([[2.5]]))
        >>> histogram.counts, histogram.limit, histogram.magnitude_counts()
        (tensor([[0, 1, 3, 1]]), tensor([3.], dtype=torch.float64), tensor([[4, 1]]))
    """

    def __init__(self, bins: int) -> None:
        bins = integer_number(bins, 'bins', 'a number of histogram bins')
        if bins < 2 or bins % 2:
            raise ValueError(f'a symmetric histogram needs an even number of bins, got {bins}')
        self.bins = bins
        self.counts: Optional[torch.Tensor] = None
        self.limit: Optional[torch.Tensor] = None
        self.min: Optional[torch.Tensor] = None
        self.max: Optional[torch.Tensor] = None

    @property
    def width(self) -> torch.Tensor:
        """The bin width, per channel."""
        return 2 * self.limit / self.bins

    def add(self, rows: torch.Tensor) -> None:
        """Count ``rows`` (channels x values) in, growing the limit first if needed."""
        rows = rows.double()
        magnitude = rows.abs().amax(1)
        if self.counts is None:
            self.limit = magnitude.clamp(min=_TINY)
            self.counts = torch.zeros(rows.shape[0], self.bins, dtype=torch.long)
            self.min, self.max = rows.amin(1), rows.amax(1)
        else:
            self._grow(torch.ceil(magnitude / self.limit).clamp(min=1))
            self.min = torch.minimum(self.min, rows.amin(1))
            self.max = torch.maximum(self.max, rows.amax(1))
        index = self._bin(rows) + self.bins * torch.arange(rows.shape[0])[:, None]
        self.counts += torch.bincount(index.flatten(),
                                      minlength=self.counts.numel()).view_as(self.counts)

    def _bin(self, rows: torch.Tensor) -> torch.Tensor:
        # Bin half + j holds [j w, (j+1) w) and bin half - 1 - j holds (-(j+1) w, -j w]:
        # x and -x always share a bin of |x|, whichever grid (gray levels) the values lie on.
        half = self.bins // 2
        steps = (rows.abs() / self.width[:, None]).floor().long()
        index = torch.where(rows >= 0, half + steps, half - 1 - steps)
        return index.clamp(0, self.bins - 1)

    def _grow(self, factor: torch.Tensor) -> None:
        """Multiply the limit by ``factor`` (whole numbers, float64, one per channel)."""
        if bool((factor == 1).all()):
            return
        # bin half + j moves to half + floor(j / factor); the same as
        # ((factor - 1) * half + old) // factor, without that product, which overflows
        # int64 when the limit grows from the floor an all-zero first batch leaves.  The
        # factor itself stays float64: from that floor, or when a later batch holds an
        # attention mask's -3.4e38, it passes int64's 9.2e18.  Any factor of ``bins`` or
        # more moves every old bin into one of the two around 0, so the re-binning
        # takes it capped there.
        half = self.bins // 2
        old = torch.arange(self.bins)[None, :]
        steps = factor.clamp(max=self.bins).long()[:, None]
        new = half + torch.div(old - half, steps, rounding_mode='floor')
        self.counts = torch.zeros_like(self.counts).scatter_add_(1, new, self.counts)
        self.limit = self.limit * factor

    def magnitude_counts(self) -> torch.Tensor:
        """Counts of ``|x|`` in ``bins // 2`` bins over ``[0, limit]``, per channel."""
        half = self.bins // 2
        return self.counts[:, half:] + self.counts[:, :half].flip(1)

    @property
    def magnitude_max(self) -> torch.Tensor:
        """The largest ``|x|`` observed, per channel."""
        return torch.maximum(self.min.abs(), self.max.abs())


class HistogramObserver(Observer):
    """Base of the observers that fill a :class:`SymmetricHistogram` and pick a range from it.

    Args:
        channel_axis: see :class:`~razorlib.quantization.observers.base.Observer`.
        bins: the number of histogram bins over ``[-limit, limit]`` (half of them for
            ``|x|``), an even integer; precision is one bin, ``2 * limit / bins``.

    Raises:
        TypeError: ``bins`` is no integer.
        ValueError: ``bins`` is odd or below 2.

    Example:
        >>> from razorlib.quantization.observers import OBSERVERS
        >>> sorted({cls.name for cls in OBSERVERS.module_dict.values()
        ...         if issubclass(cls, HistogramObserver)})
        ['kl', 'mse', 'percentile']
    """

    def __init__(self, channel_axis: Optional[int] = None, bins: int = 4096) -> None:
        super().__init__(channel_axis)
        self.histogram = SymmetricHistogram(bins)

    def _update(self, rows: torch.Tensor) -> None:
        self.histogram.add(rows)
