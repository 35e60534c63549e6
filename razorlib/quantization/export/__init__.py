"""Export a quantized graph: QDQ ONNX, or a plain ONNX with TensorRT dynamic ranges."""
from .api import EXPORTERS, export_graph, quantized_platform
from .plain import export_onnx, write_quantized_parameters
from .ort_session import (INT8_KERNELS_SATURATE, int8_kernels_saturate, int8_session,
                          optimization_level)
from .qdq import MIN_QDQ_OPSET, export_qdq_onnx, integer_dtype
from .trt_json import (TRT_WEIGHT_QUANT_MAX, activation_ranges, export_trt_json, float_layers,
                       trt_json_paths, weights_off_trt_grid)

__all__ = ['EXPORTERS', 'INT8_KERNELS_SATURATE', 'MIN_QDQ_OPSET', 'TRT_WEIGHT_QUANT_MAX',
           'activation_ranges', 'export_graph', 'export_onnx', 'export_qdq_onnx',
           'export_trt_json', 'float_layers', 'int8_kernels_saturate', 'int8_session',
           'integer_dtype', 'optimization_level', 'quantized_platform', 'trt_json_paths',
           'weights_off_trt_grid', 'write_quantized_parameters']
