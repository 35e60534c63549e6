"""The min-max observer: the range is the smallest and largest value seen."""
from typing import Optional, Tuple

import torch

from ...ir import TensorQuantizationConfig
from .base import Observer, register_observer

__all__ = ['MinMaxObserver']


@register_observer
class MinMaxObserver(Observer):
    """Renders the exact range of everything observed; an outlier widens it.

    Args:
        channel_axis: see :class:`~razorlib.quantization.observers.base.Observer`.

    Example:
        >>> from razorlib.ir import TensorQuantizationConfig, QuantizationProperty as P
        >>> observer = MinMaxObserver(channel_axis=0)
        >>> observer.observe(torch.tensor([[1.27, -0.5], [0.1, -2.54]]))
        >>> config = TensorQuantizationConfig(P.PER_CHANNEL | P.LINEAR | P.SYMMETRICAL,
        ...                                   channel_axis=0)
        >>> observer.render(config)
        >>> config.scale
        tensor([0.0100, 0.0200])
    """
    name = 'minmax'

    def __init__(self, channel_axis: Optional[int] = None) -> None:
        super().__init__(channel_axis)
        self._lo: Optional[torch.Tensor] = None
        self._hi: Optional[torch.Tensor] = None

    def _update(self, rows: torch.Tensor) -> None:
        lo, hi = rows.amin(1), rows.amax(1)
        if self._lo is not None:
            lo, hi = torch.minimum(lo, self._lo), torch.maximum(hi, self._hi)
        self._lo, self._hi = lo, hi

    def _range(self, config: TensorQuantizationConfig) -> Tuple[torch.Tensor, torch.Tensor]:
        return self._lo, self._hi
