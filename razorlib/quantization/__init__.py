"""Quantization: target platforms, dispatch and observers.

``dispatch_graph`` puts every operation on a platform (the quantized one, FP32, or SOI for
shape-or-index subgraphs); observers calibrate quantization configs.

Example:
    >>> import torch
    >>> from razorlib.ir import TensorQuantizationConfig
    >>> config = TensorQuantizationConfig(observer_algorithm='percentile')
    >>> observer = build_observer(config, percentile=99.0)
    >>> observer.observe(torch.linspace(-1.0, 1.0, 1001))
    >>> observer.render(config)
    >>> round(config.scale.item() * 127, 2)
    0.99
"""
from .dispatch import (DISPATCHERS, AggressiveDispatcher, AllInDispatcher,
                       ConservativeDispatcher, DispatchingTable, GraphDispatcher,
                       PointwiseDispatcher, dispatch_graph, find_soi_operations,
                       register_dispatcher)
from .functional import ROUNDING_FUNCTIONS, linear_fake_quantize
from .observers import (OBSERVERS, KLObserver, MinMaxObserver, MSEObserver, Observer,
                        PercentileObserver, build_observer, register_observer)
from .platform import (QUANTIZABLE_OP_TYPES, PlatformKind, TargetPlatform, as_platform,
                       is_export_platform, is_float_platform, is_quantized_platform)

__all__ = [
    'AggressiveDispatcher', 'AllInDispatcher', 'ConservativeDispatcher', 'DISPATCHERS',
    'DispatchingTable', 'GraphDispatcher', 'KLObserver', 'MSEObserver', 'MinMaxObserver',
    'OBSERVERS', 'Observer', 'PercentileObserver', 'PlatformKind', 'PointwiseDispatcher',
    'QUANTIZABLE_OP_TYPES', 'ROUNDING_FUNCTIONS', 'TargetPlatform', 'as_platform',
    'build_observer', 'dispatch_graph', 'find_soi_operations', 'is_export_platform',
    'is_float_platform', 'is_quantized_platform', 'linear_fake_quantize', 'register_dispatcher',
    'register_observer'
]
