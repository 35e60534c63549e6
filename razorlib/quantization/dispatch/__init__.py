"""Dispatch: put every operation of a graph on a platform before it is quantized.

Example:
    >>> import torch
    >>> from razorlib.ir import BaseGraph
    >>> graph = BaseGraph()
    >>> x = graph.create_variable('x')
    >>> graph.mark_variable_as_graph_input(x)
    >>> w = graph.create_variable('w', torch.randn(4, 3, 1, 1), is_parameter=True)
    >>> conv = graph.create_operation('Conv', 'conv', inputs=[x, w],
    ...                               outputs=[graph.create_variable()])
    >>> soft = graph.create_operation('Softmax', 'soft', inputs=conv.outputs,
    ...                               outputs=[graph.create_variable()])
    >>> graph = dispatch_graph(graph, 'TRT_INT8')
    >>> [(op.name, op.platform.name) for op in graph.operations.values()]
    [('conv', 'TRT_INT8'), ('soft', 'FP32')]
"""
from collections.abc import Mapping
from typing import Any, Optional, Union

from ...ir import BaseGraph, QuantableOperation
from ...ir.components import build_component
from ..platform import QUANTIZABLE_OP_TYPES, TargetPlatform, as_platform, is_quantized_platform
from .dispatchers import (DISPATCHERS, AggressiveDispatcher, AllInDispatcher,
                          ConservativeDispatcher, GraphDispatcher, PointwiseDispatcher,
                          register_dispatcher)
from .soi import find_soi_operations, is_index_producer
from .table import DispatchingTable

__all__ = [
    'AggressiveDispatcher', 'AllInDispatcher', 'ConservativeDispatcher', 'DISPATCHERS',
    'DispatchingTable', 'GraphDispatcher', 'PointwiseDispatcher', 'dispatch_graph',
    'find_soi_operations', 'is_index_producer', 'register_dispatcher'
]


def dispatch_graph(graph: BaseGraph, platform: Union[TargetPlatform, str],
                   dispatcher: Union[str, Mapping, GraphDispatcher] = 'conservative',
                   dispatching_table: Optional[Union[DispatchingTable, Mapping]] = None
                   ) -> BaseGraph:
    """Set ``platform`` of every operation: SOI, the quantized platform, FP32 or an override.

    Shape-or-index subgraphs (:func:`find_soi_operations`) go to SOI; the table's entries
    take precedence over everything; the dispatcher decides the rest (see
    :mod:`~razorlib.quantization.dispatch.dispatchers` for the rules).

    Args:
        graph: the graph; its operations' ``platform`` is set in place.
        platform: the quantized platform (``TRT_INT8``, ``ORT_INT8``), or its name.
        dispatcher: a registered dispatcher's name (``'conservative'``,
            ``'aggressive'``, ``'pointwise'``, ``'allin'`` or a class name), a config dict
            (``dict(type='ConservativeDispatcher')``) or a :class:`GraphDispatcher`.
        dispatching_table: ``op name -> platform`` overrides, as a
            :class:`DispatchingTable` or a mapping.

    Returns:
        ``graph``, so calls chain.

    Raises:
        TypeError: an argument has the wrong type; the message names the parameter.
        KeyError: an unknown dispatcher (the message lists the registered ones).
        ValueError: a platform that is not quantized, a table entry for an operation not
            in the graph or one placing it on another quantized platform (no quantizer
            would quantize it there: it would run in floating point), or a graph that
            holds quantable operations already.
    """
    if not isinstance(graph, BaseGraph):
        raise TypeError(f'graph must be a BaseGraph, got {type(graph).__name__}')
    quantized = [name for name, op in graph.operations.items()
                 if isinstance(op, QuantableOperation)]
    if quantized:
        raise ValueError(f'graph {graph.name!r} is quantized already (operations {quantized}); '
                         'dispatch a graph straight from from_onnx/from_torch')
    platform = _quantized_platform(platform)
    rule = build_component(DISPATCHERS, dispatcher, base=GraphDispatcher, parameter='dispatcher')
    table = _as_table(dispatching_table)
    unknown = [name for name in table if name not in graph.operations]
    if unknown:
        raise ValueError(f'dispatching_table names operations not in graph {graph.name!r}: '
                         f'{unknown}')
    foreign = {name: placed_on.name for name, placed_on in table.items()
               if is_quantized_platform(placed_on) and placed_on is not platform}
    if foreign:
        raise ValueError(f'dispatching_table places operations of graph {graph.name!r} on '
                         f'a quantized platform other than {platform.name}: {foreign}; only '
                         f'{platform.name} is quantized, so they would run in floating point '
                         f'(pin them to {platform.name}, or to FP32 on purpose)')
    pinned = {op.name: TargetPlatform.SOI for op in find_soi_operations(graph)}
    pinned.update(table.items())
    for name, placed_on in rule.dispatch(graph, platform, pinned).items():
        graph.operations[name].platform = placed_on
    return graph


def _quantized_platform(value: Any) -> TargetPlatform:
    platform = as_platform(value)
    if platform not in QUANTIZABLE_OP_TYPES:
        known = ', '.join(member.name for member in QUANTIZABLE_OP_TYPES)
        raise ValueError(f'platform must be a quantized platform ({known}), got '
                         f'{platform.name}')
    return platform


def _as_table(value: Any) -> DispatchingTable:
    if value is None:
        return DispatchingTable()
    if isinstance(value, DispatchingTable):
        return value
    if isinstance(value, Mapping):
        return DispatchingTable(value)
    raise TypeError(f'dispatching_table must be a DispatchingTable or a mapping of '
                    f'operation names to platforms, got {type(value).__name__}')
