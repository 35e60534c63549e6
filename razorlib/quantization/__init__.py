"""Quantization: target platforms and dispatch.

``dispatch_graph`` puts every operation on a platform: the quantized one, FP32, or SOI
for shape-or-index subgraphs.

Example:
    >>> from razorlib.ir import BaseGraph
    >>> graph = BaseGraph()
    >>> x = graph.create_variable('x')
    >>> graph.mark_variable_as_graph_input(x)
    >>> relu = graph.create_operation('Relu', 'relu', inputs=[x],
    ...                               outputs=[graph.create_variable('y')])
    >>> dispatch_graph(graph, TargetPlatform.TRT_INT8).operations['relu'].platform
    <TargetPlatform.TRT_INT8: 'TRT_INT8'>
"""
from .dispatch import (DISPATCHERS, AggressiveDispatcher, AllInDispatcher,
                       ConservativeDispatcher, DispatchingTable, GraphDispatcher,
                       PointwiseDispatcher, dispatch_graph, find_soi_operations,
                       register_dispatcher)
from .platform import (QUANTIZABLE_OP_TYPES, PlatformKind, TargetPlatform, as_platform,
                       is_export_platform, is_float_platform, is_quantized_platform)

__all__ = [
    'AggressiveDispatcher', 'AllInDispatcher', 'ConservativeDispatcher', 'DISPATCHERS',
    'DispatchingTable', 'GraphDispatcher', 'PlatformKind', 'QUANTIZABLE_OP_TYPES',
    'PointwiseDispatcher', 'TargetPlatform', 'as_platform', 'dispatch_graph',
    'find_soi_operations', 'is_export_platform', 'is_float_platform', 'is_quantized_platform',
    'register_dispatcher'
]
