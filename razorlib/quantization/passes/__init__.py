"""Post-training quantization passes that use calibration data, registered in
:data:`razorlib.registry.PTQ_PASSES` and listed in a PTQ config's ``ptq.ptq_passes``.

=============================  ==============  ===========================================
pass (alias)                   stage           does
=============================  ==============  ===========================================
``LayerwiseEqualization``      ``float``       equalizes consecutive layers' channel
(``equalization``)                             ranges (cross-layer equalization),
                                               FP32-exact
``ClipEqualization``           ``float``       amplifies the channels that stay below a
(``clip_equalization``)                        ReLU6, exact on the calibrated ranges
``AdaRound`` (``adaround``)    ``calibrated``  learns each weight's rounding to
                                               reconstruct its layer's FP32 output
``ActivationCentering``        ``calibrated``  shifts ReLU6 outputs to the middle of
(``activation_centering``)                     their range, so symmetric int8 uses all
                                               its codes; FP32-exact
``ActivationScaleSearch``      ``calibrated``  searches each activation scale for the
(``activation_scale_search``)                  error of the graph's output, not the
                                               tensor's own
``BiasCorrection``             ``calibrated``  removes the mean shift quantization adds
(``bias_correction``)                          to each layer's output
``MixedPrecision``             ``calibrated``  keeps the fewest layers in floating point
(``mixed_precision``)                          that reach a target SNR or metric
=============================  ==============  ===========================================

Example:
    >>> from razorlib.registry import PTQ_PASSES
    >>> sorted(name for name in PTQ_PASSES.module_dict if name[0].isupper())
    ... # doctest: +NORMALIZE_WHITESPACE
    ['ActivationCentering', 'ActivationScaleSearch', 'AdaRound', 'BiasCorrection',
     'ClipEqualization', 'LayerwiseEqualization', 'MixedPrecision']
"""
from ...registry import PTQ_PASSES
from .adaround import AdaRound, rectified_sigmoid
from .base import STAGES, PTQPass, build_ptq_pass, build_ptq_passes, run_ptq_passes
from .bias_correction import BiasCorrection, channel_means
from .centering import ActivationCentering, centerable_clips
from .clip_equalization import ClipEqualization, clipped_pairs
from .equalization import LayerwiseEqualization, equalizable_pairs
from .layers import (LAYER_TYPES, LayerRecord, kernel_output, output_channel_axis, record_layer,
                     weight_layers)
from .mixed_precision import (FloatedOperation, MixedPrecision, keep_in_float,
                              restore_quantized)
from .reconstruction import ActivationScaleSearch, activation_roots

__all__ = ['ActivationCentering', 'ActivationScaleSearch', 'AdaRound', 'BiasCorrection',
           'ClipEqualization', 'FloatedOperation', 'LAYER_TYPES', 'LayerRecord',
           'LayerwiseEqualization', 'MixedPrecision', 'PTQPass', 'PTQ_PASSES', 'STAGES',
           'activation_roots', 'build_ptq_pass', 'build_ptq_passes', 'centerable_clips',
           'channel_means', 'clipped_pairs', 'equalizable_pairs', 'kernel_output',
           'keep_in_float', 'output_channel_axis', 'record_layer', 'rectified_sigmoid',
           'restore_quantized', 'run_ptq_passes', 'weight_layers']
