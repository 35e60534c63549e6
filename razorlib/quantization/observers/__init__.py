"""Observers: collect a tensor's statistics over batches, render a quantization config.

Each is registered in :data:`razorlib.registry.OBSERVERS` under its class name and its
short name; a config's ``observer_algorithm`` holds either.

======================  ============  ======================================================
class                   short name    range
======================  ============  ======================================================
``MinMaxObserver``      minmax        the smallest and largest value seen
``PercentileObserver``  percentile    a percentile of the values (default 99.99)
``KLObserver``          kl            TensorRT's entropy calibration: least KL divergence
``MSEObserver``         mse           the clipping range of least quantization MSE
======================  ============  ======================================================

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
from .base import (MIN_SCALE, OBSERVERS, Observer, build_observer, observer_class,
                   range_to_scale_offset, register_observer)
from .histogram import HistogramObserver, SymmetricHistogram, histogram_quantile
from .kl import KLObserver, kl_threshold_bin
from .minmax import MinMaxObserver
from .mse import MSEObserver
from .percentile import PercentileObserver

__all__ = [
    'HistogramObserver', 'KLObserver', 'MIN_SCALE', 'MSEObserver', 'MinMaxObserver',
    'OBSERVERS', 'Observer', 'PercentileObserver', 'SymmetricHistogram', 'build_observer',
    'histogram_quantile', 'kl_threshold_bin', 'observer_class', 'range_to_scale_offset',
    'register_observer'
]
