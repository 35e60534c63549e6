"""Quantization: target platforms, dispatch, quantizers, calibration, execution, export.

The pipeline: ``dispatch_graph`` puts every operation on a platform (the quantized one,
FP32, or SOI for shape-or-index subgraphs); a platform's quantizer turns the operations on
the quantized platform into :class:`~razorlib.ir.QuantableOperation`\\ s with linked
configs (``quantize_graph`` does both); ``calibrate`` runs observers over a dataloader and
renders the configs; ``QuantExecutor`` runs the graph in simulated INT8, ``analyse_error``
measures its SNR against FP32, and ``export_graph`` writes QDQ ONNX or TensorRT ranges.
``quantize_torch_model`` and ``quantize_onnx_model`` go from a model to a calibrated graph
in one call.  Observers, quantizers, dispatchers and exporters are registered in
:mod:`razorlib.registry` and built from names or config dicts.

Example:
    >>> import torch
    >>> from razorlib.ir import BaseGraph
    >>> graph = BaseGraph()
    >>> x = graph.create_variable('x')
    >>> graph.mark_variable_as_graph_input(x)
    >>> w = graph.create_variable('w', torch.randn(4, 3, 1, 1), is_parameter=True)
    >>> conv = graph.create_operation('Conv', 'conv', inputs=[x, w],
    ...                               outputs=[graph.create_variable('y')])
    >>> conv = quantize_graph(graph, TargetPlatform.TRT_INT8).operations['conv']
    >>> observer = build_observer(conv.input_quant_config[1])
    >>> observer.observe(w.value)
    >>> observer.render(conv.input_quant_config[1])
    >>> conv.input_quant_config[1].scale.shape
    torch.Size([4])
"""
from .analysis import LayerError, QuantErrorReport, SNRMeter, analyse_error, snr_db
from .api import (DEFAULT_PASSES, prepare_graph, quantize_onnx_model, quantize_torch_model,
                  set_activation_observer)
from .batches import graph_batches
from .calibration import calibrate, render_passive_configs
from .dispatch import (DISPATCHERS, AggressiveDispatcher, AllInDispatcher,
                       ConservativeDispatcher, DispatchingTable, GraphDispatcher,
                       PointwiseDispatcher, dispatch_graph, find_soi_operations,
                       register_dispatcher)
from .executor import QuantExecutor, quantized_inputs
from .export import (EXPORTERS, activation_ranges, export_graph, export_onnx, export_qdq_onnx,
                     export_trt_json, int8_session, quantized_platform, trt_json_paths)
from .functional import (ROUNDING_FUNCTIONS, config_scale_offset, fake_quantize,
                         linear_fake_quantize, quantize_integers)
from .observers import (OBSERVERS, KLObserver, MinMaxObserver, MSEObserver, Observer,
                        PercentileObserver, build_observer, observer_class, register_observer)
from .platform import (DEFAULT_EXPORT_FORMATS, QUANTIZABLE_OP_TYPES, ExportFormat, PlatformKind,
                       TargetPlatform, as_export_format, as_platform, is_float_platform,
                       is_quantized_platform)
from .lsq import LSQGraph, follow_passive_scales, lsq_fake_quantize
from .passes import (PTQ_PASSES, ActivationCentering, ActivationScaleSearch, AdaRound,
                     BiasCorrection, ClipEqualization, LayerwiseEqualization, MixedPrecision,
                     PTQPass, build_ptq_pass)
from .quantize import quantize_graph
from .settings import PTQSettings
from .quantizers import (QUANTIZERS, BaseQuantizer, ORTQDQQuantizer, ScaleSharing, TensorFormat,
                         TensorRTQuantizer, quantizer_class, register_quantizer)
from .state import (bake_parameters, dequantize_graph, dequantized, quantable_operations,
                    restore_quantize_state)

__all__ = [
    'ActivationCentering', 'ActivationScaleSearch', 'AdaRound', 'BiasCorrection',
    'ClipEqualization', 'LSQGraph',
    'LayerwiseEqualization', 'MixedPrecision', 'PTQPass', 'PTQ_PASSES', 'build_ptq_pass',
    'follow_passive_scales', 'lsq_fake_quantize',
    'AggressiveDispatcher', 'AllInDispatcher', 'BaseQuantizer', 'ConservativeDispatcher',
    'DEFAULT_EXPORT_FORMATS', 'DEFAULT_PASSES', 'DISPATCHERS', 'DispatchingTable', 'EXPORTERS',
    'ExportFormat', 'GraphDispatcher', 'KLObserver', 'LayerError', 'MSEObserver',
    'MinMaxObserver', 'OBSERVERS', 'ORTQDQQuantizer', 'Observer', 'PTQSettings',
    'PercentileObserver', 'PlatformKind', 'PointwiseDispatcher', 'QUANTIZABLE_OP_TYPES',
    'QUANTIZERS', 'QuantErrorReport', 'QuantExecutor', 'ROUNDING_FUNCTIONS', 'SNRMeter',
    'ScaleSharing', 'TargetPlatform', 'TensorFormat', 'TensorRTQuantizer', 'activation_ranges',
    'analyse_error', 'as_export_format', 'as_platform', 'bake_parameters', 'build_observer',
    'calibrate', 'config_scale_offset', 'dequantize_graph', 'dequantized', 'dispatch_graph',
    'export_graph', 'export_onnx', 'export_qdq_onnx', 'export_trt_json', 'fake_quantize',
    'find_soi_operations', 'graph_batches', 'int8_session', 'is_float_platform',
    'is_quantized_platform',
    'linear_fake_quantize', 'observer_class', 'prepare_graph', 'quantable_operations',
    'quantize_graph', 'quantize_integers', 'quantize_onnx_model', 'quantize_torch_model',
    'quantized_inputs', 'quantized_platform', 'quantizer_class', 'register_dispatcher',
    'register_observer', 'register_quantizer', 'render_passive_configs',
    'restore_quantize_state', 'set_activation_observer', 'snr_db', 'trt_json_paths'
]
