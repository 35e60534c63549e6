"""Export a quantized graph: QDQ ONNX, or a plain ONNX with TensorRT dynamic ranges."""
from .api import EXPORTERS, export_graph, quantized_platform
from .plain import export_onnx
from .qdq import MIN_QDQ_OPSET, export_qdq_onnx, integer_dtype
from .trt_json import activation_ranges, export_trt_json, trt_json_paths

__all__ = ['EXPORTERS', 'MIN_QDQ_OPSET', 'activation_ranges', 'export_graph', 'export_onnx',
           'export_qdq_onnx', 'export_trt_json', 'integer_dtype', 'quantized_platform',
           'trt_json_paths']
