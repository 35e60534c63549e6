"""Quantizers: per-platform rules that turn dispatched operations into quantable ones."""
from .base import QUANTIZERS, BaseQuantizer, register_quantizer
from .formats import (WEIGHT_CHANNEL_AXIS, ScaleSharing, TensorFormat, fp32_config, last_axis,
                      weight_channel_axis)
from .links import (LINK_PASSES, fuse_activations, join_variable_readers, master_biases,
                    share_scales)
from .ort import ORTQDQQuantizer
from .tensorrt import TensorRTQuantizer

__all__ = [
    'BaseQuantizer', 'LINK_PASSES', 'ORTQDQQuantizer', 'QUANTIZERS', 'ScaleSharing',
    'TensorFormat', 'TensorRTQuantizer', 'WEIGHT_CHANNEL_AXIS', 'fp32_config',
    'fuse_activations', 'join_variable_readers', 'last_axis', 'master_biases',
    'register_quantizer', 'share_scales', 'weight_channel_axis'
]
