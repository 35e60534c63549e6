"""export_graph: write a quantized graph in an export format, by default its platform's.

=============  ===========================================================================
``QDQ_ONNX``   QuantizeLinear/DequantizeLinear pairs, integer weights (``export_qdq_onnx``)
``TRT_JSON``   a plain ONNX model and a JSON of TensorRT dynamic ranges (``export_trt_json``)
``ONNX``       the plain FP32 model, parameters dequantized (``export_onnx``)
=============  ===========================================================================

The exporters are registered in :data:`razorlib.registry.EXPORTERS` under the format's
name and their function name; a quantized platform's name stands for its default format
(:data:`~razorlib.quantization.platform.DEFAULT_EXPORT_FORMATS`).  Every exporter works on
a copy: the graph's structure, values and configs stay as they are.
"""
import os
from collections.abc import Mapping
from typing import Any, Optional, Set, Union

import onnx

from ...ir import BaseGraph
from ...ir.components import registered, split_type
from ...registry import EXPORTERS
from ..platform import (DEFAULT_EXPORT_FORMATS, ExportFormat, TargetPlatform, as_export_format,
                        as_platform)
from ..state import quantable_operations
from .plain import export_onnx
from .qdq import export_qdq_onnx
from .trt_json import export_trt_json

__all__ = ['EXPORTERS', 'export_graph', 'quantized_platform']

EXPORTERS.register_module(name=[ExportFormat.QDQ_ONNX.name, 'export_qdq_onnx'],
                          module=export_qdq_onnx)
EXPORTERS.register_module(name=[ExportFormat.TRT_JSON.name, 'export_trt_json'],
                          module=export_trt_json)
EXPORTERS.register_module(name=[ExportFormat.ONNX.name, 'export_onnx'], module=export_onnx)


def quantized_platform(graph: BaseGraph) -> Optional[TargetPlatform]:
    """The platform ``graph`` was quantized for; None for a graph not quantized.

    Raises:
        ValueError: its quantable operations are on more than one platform.

    Example:
        >>> quantized_platform(BaseGraph()) is None
        True
    """
    platforms: Set[TargetPlatform] = {as_platform(op.platform)
                                      for op in quantable_operations(graph)}
    if len(platforms) > 1:
        names = sorted(platform.name for platform in platforms)
        raise ValueError(f'graph {graph.name!r} is quantized for several platforms ({names}); '
                         'name the export format')
    return next(iter(platforms), None)


def export_graph(graph: BaseGraph, path: Union[str, os.PathLike],
                 platform: Union[ExportFormat, TargetPlatform, str, Mapping, None] = None,
                 **options: Any) -> onnx.ModelProto:
    """Write a calibrated graph to ``path`` in an export format.

    Args:
        graph: a quantized, calibrated graph; it is never changed.
        path: the file to write (``TRT_JSON`` derives its two files from it).
        platform: what to write: an export format (``'QDQ_ONNX'``, ``'TRT_JSON'``,
            ``'ONNX'``, or another name registered in
            :data:`~razorlib.registry.EXPORTERS`), a quantized platform (``'TRT_INT8'``:
            its default format), or a config dict ``dict(type=..., **options)``.  None
            writes the default format of the platform the graph was quantized for, and a
            graph not quantized as plain ``ONNX``.
        **options: passed to the exporter, after those of a config dict.

    Returns:
        The ONNX model written.

    Raises:
        KeyError: ``platform`` names no export format and no quantized platform (the
            message lists the registered formats); and what the exporter raises.
        ValueError: ``platform`` names a quantized platform other than the one the graph
            is quantized for, or the graph is not quantized (its model would be no model
            for that platform; the message says what to export instead).

    Example:
        >>> import torch
        >>> from razorlib.ir import from_torch
        >>> from razorlib.quantization import calibrate, quantize_graph
        >>> net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU())
        >>> graph = quantize_graph(from_torch(net, torch.randn(1, 3, 8, 8)), 'TRT_INT8')
        >>> graph = calibrate(graph, [torch.randn(1, 3, 8, 8)], progress=False)
        >>> import tempfile, os
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     model = export_graph(graph, os.path.join(folder, 'net.onnx'))  # TRT_INT8: QDQ
        ...     _ = export_graph(graph, os.path.join(folder, 'ranges.json'), 'TRT_JSON')
        ...     sorted(os.listdir(folder))
        ['net.onnx', 'ranges.json', 'ranges.onnx']
        >>> [node.op_type for node in model.graph.node]  # doctest: +NORMALIZE_WHITESPACE
        ['QuantizeLinear', 'DequantizeLinear', 'DequantizeLinear', 'Conv', 'Relu',
         'QuantizeLinear', 'DequantizeLinear']
    """
    if platform is None:
        quantized = quantized_platform(graph)
        platform = ExportFormat.ONNX if quantized is None else DEFAULT_EXPORT_FORMATS.get(
            quantized, ExportFormat.QDQ_ONNX)
    if isinstance(platform, Mapping):
        platform, given = split_type(platform, 'export_graph platform')
        options = {**given, **options}
    _check_named_platform(graph, platform)
    return _exporter(platform)(graph, path, **options)


def _named_platform(platform: Any) -> Optional[TargetPlatform]:
    """The quantized platform ``platform`` names, None for a format or exporter name."""
    if isinstance(platform, str) and platform.upper() not in ExportFormat.__members__:
        platform = TargetPlatform.__members__.get(platform.upper())
    return platform if platform in DEFAULT_EXPORT_FORMATS else None


def _check_named_platform(graph: BaseGraph, platform: Any) -> None:
    """Refuse a platform name that is not the graph's: ``'TRT_INT8'`` for a graph
    quantized for ORT_INT8 would write its uint8 asymmetric Q/DQ pairs, which TensorRT does
    not run, as a model for TensorRT; for a graph not quantized, an FP32 model as INT8."""
    named = _named_platform(platform)
    if named is None:
        return
    quantized = quantized_platform(graph)
    if quantized is named:
        return
    if quantized is None:
        held, instead = 'is not quantized', 'export it as plain ONNX'
    else:
        held = f'is quantized for {quantized.name}'
        instead = f'name the export format ({DEFAULT_EXPORT_FORMATS[named].name}) to write it'
    raise ValueError(f'export_graph: platform {named.name} was named, but graph '
                     f'{graph.name!r} {held}; quantize it for {named.name}, or {instead}')


def _exporter(platform: Union[ExportFormat, TargetPlatform, str]):
    if isinstance(platform, str):
        EXPORTERS.import_from_location()
        if platform in EXPORTERS.module_dict:  # a format or an exporter of its own name
            return EXPORTERS.module_dict[platform]
    try:
        export_format = as_export_format(platform, parameter='export_graph platform')
    except ValueError as error:
        raise KeyError(f'{error}; registered export formats: '
                       f'{", ".join(sorted(EXPORTERS.module_dict))}') from None
    return registered(EXPORTERS, export_format.name)
