"""Observers: collect a tensor's statistics over batches, render a quantization config.

============  =================================================================
minmax        the smallest and largest value seen
percentile    a percentile of the values (default 99.99), from a histogram
kl            TensorRT's entropy calibration: the threshold minimizing KL divergence
mse           the clipping range minimizing the quantization MSE, by grid search
============  =================================================================

Example:
    >>> import torch
    >>> from razorlib.ir import TensorQuantizationConfig
    >>> config = TensorQuantizationConfig(observer_algorithm='minmax')
    >>> observer = build_observer(config)
    >>> for batch in (torch.tensor([0.5, -1.0]), torch.tensor([2.54])):
    ...     observer.observe(batch)
    >>> observer.render(config)
    >>> config.scale, config.offset
    (tensor(0.0200), tensor(0.))
"""
from .base import (MIN_SCALE, OBSERVERS, Observer, build_observer, range_to_scale_offset,
                   register_observer)
from .histogram import HistogramObserver, SymmetricHistogram, histogram_quantile
from .kl import KLObserver, kl_threshold_bin
from .minmax import MinMaxObserver
from .mse import MSEObserver
from .percentile import PercentileObserver

__all__ = [
    'HistogramObserver', 'KLObserver', 'MIN_SCALE', 'MSEObserver', 'MinMaxObserver',
    'OBSERVERS', 'Observer', 'PercentileObserver', 'SymmetricHistogram', 'build_observer',
    'histogram_quantile', 'kl_threshold_bin', 'range_to_scale_offset', 'register_observer'
]
