"""Quantizers: per-platform rules that turn dispatched operations into quantable ones."""
from .base import QUANTIZERS, BaseQuantizer, quantizer_class, register_quantizer
from .formats import (WEIGHT_CHANNEL_AXIS, ScaleSharing, TensorFormat, fp32_config, last_axis,
                      weight_channel_axis)
from .links import (LINK_PASSES, FuseActivations, JoinVariableReaders, LinkPass, MasterBiases,
                    ShareScales)
from .ort import ORTQDQQuantizer
from .tensorrt import TensorRTQuantizer

__all__ = [
    'BaseQuantizer', 'FuseActivations', 'JoinVariableReaders', 'LINK_PASSES', 'LinkPass',
    'MasterBiases', 'ORTQDQQuantizer', 'QUANTIZERS', 'ScaleSharing', 'ShareScales',
    'TensorFormat', 'TensorRTQuantizer', 'WEIGHT_CHANNEL_AXIS', 'fp32_config', 'last_axis',
    'quantizer_class', 'register_quantizer', 'weight_channel_axis'
]
