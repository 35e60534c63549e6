"""export_graph: write a quantized graph in one of the export formats.

=============  ===========================================================================
``QDQ_ONNX``   QuantizeLinear/DequantizeLinear pairs, integer weights (``export_qdq_onnx``)
``TRT_JSON``   a plain ONNX model and a JSON of TensorRT dynamic ranges (``export_trt_json``)
``ONNX``       the plain FP32 model, parameters dequantized (``export_onnx``)
=============  ===========================================================================

Every exporter works on a copy: the graph's structure, values and configs stay as they are.
"""
import os
from typing import Callable, Dict, Union

import onnx

from ...ir import BaseGraph
from ..platform import TargetPlatform, as_platform
from .plain import export_onnx
from .qdq import export_qdq_onnx
from .trt_json import export_trt_json

__all__ = ['EXPORTERS', 'export_graph']

EXPORTERS: Dict[TargetPlatform, Callable[[BaseGraph, Union[str, os.PathLike]],
                                         onnx.ModelProto]] = {
    TargetPlatform.QDQ_ONNX: export_qdq_onnx,
    TargetPlatform.TRT_JSON: export_trt_json,
    TargetPlatform.ONNX: export_onnx,
}
"""Export platform -> the function that writes it."""


def export_graph(graph: BaseGraph, path: Union[str, os.PathLike],
                 platform: Union[TargetPlatform, str] = TargetPlatform.QDQ_ONNX
                 ) -> onnx.ModelProto:
    """Write a calibrated graph to ``path`` in the format of an export platform.

    Args:
        graph: a quantized, calibrated graph; it is never changed.
        path: the ``.onnx`` file (``TRT_JSON`` writes the ``.json`` beside it).
        platform: ``QDQ_ONNX`` (default), ``TRT_JSON`` or ``ONNX``, or the name of one.

    Returns:
        The ONNX model written.

    Raises:
        ValueError: ``platform`` is not an export platform (the message lists them), and
            what the exporter raises.

    Example:
        >>> import torch
        >>> from razorlib.ir import from_torch
        >>> from razorlib.quantization import calibrate, quantize_graph
        >>> net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU())
        >>> graph = quantize_graph(from_torch(net, torch.randn(1, 3, 8, 8)), 'TRT_INT8')
        >>> calibrate(graph, [torch.randn(1, 3, 8, 8)], progress=False)
        >>> import tempfile, os
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     model = export_graph(graph, os.path.join(folder, 'net.onnx'))
        ...     sorted(os.listdir(folder))
        ['net.onnx']
        >>> [node.op_type for node in model.graph.node]  # doctest: +NORMALIZE_WHITESPACE
        ['QuantizeLinear', 'DequantizeLinear', 'DequantizeLinear', 'Conv', 'Relu',
         'QuantizeLinear', 'DequantizeLinear']
    """
    platform = as_platform(platform)
    if platform not in EXPORTERS:
        names = ', '.join(member.name for member in EXPORTERS)
        raise ValueError(f'{platform.name} is not an export platform; export to one of {names}')
    return EXPORTERS[platform](graph, path)
