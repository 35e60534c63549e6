"""quantize_graph: dispatch a graph, then quantize what runs on the quantized platform."""
from collections.abc import Mapping
from typing import Any, Iterable, Optional, Union

from ..ir import BaseGraph
from ..ir.passes.format_parameter import split_shared_parameter
from ..utils.caller import warn_at_caller
from .dispatch import DispatchingTable, dispatch_graph
from .platform import QUANTIZABLE_OP_TYPES, TargetPlatform, as_platform, is_quantized_platform
from .quantizers import quantizer_class
from .state import check_float32

__all__ = ['quantize_graph']

_LISTED_TYPES = 10
"""How many op types a warning names before ``...``."""


def quantize_graph(graph: BaseGraph, platform: Union[TargetPlatform, str],
                   dispatcher: Any = 'conservative',
                   dispatching_table: Optional[Union[DispatchingTable, Mapping]] = None
                   ) -> BaseGraph:
    """Dispatch ``graph`` and turn its operations on ``platform`` into quantable ones.

    Operations dispatched to FP32, FP16 or SOI stay plain operations.  A parameter that
    an operation on ``platform`` shares with other operations (a module called twice,
    quantized without the ``FormatParameter`` graph pass) is split first, one copy per
    reader, so that each quantized reader bakes and keeps aside its own value.  The
    configs are INITIAL (or FP32 for tensors that stay in floating point) and linked by the
    quantizer's link passes (run through a :class:`~razorlib.ir.PassManager`);
    calibration fills in their scales.

    Args:
        graph: the graph, changed in place; it must hold no quantable operation yet.
        platform: a platform with a quantizer in :data:`~razorlib.registry.QUANTIZERS`
            (``TRT_INT8``, ``ORT_INT8``).
        dispatcher: a name, config dict or dispatcher; see
            :func:`~razorlib.quantization.dispatch.dispatch_graph`.
        dispatching_table: see :func:`~razorlib.quantization.dispatch.dispatch_graph`.

    Returns:
        ``graph``, so calls chain.

    Raises:
        ValueError: ``platform`` is a float one (``FP32``, ``FP16``).
        TypeError: the graph computes in another floating type than float32 (a float16
            model; :func:`~razorlib.quantization.state.check_float32`), before any change.
        KeyError: no quantizer for ``platform`` (the message lists the registered ones);
            and what ``dispatch_graph`` raises (a graph quantized already, ...).

    Warns:
        UserWarning: no operation ended on ``platform``: the graph stays all in floating
            point, and would export as a plain model (the message says why).

    Example:
        >>> import torch
        >>> from razorlib.ir import BaseGraph
        >>> graph = BaseGraph()
        >>> x = graph.create_variable('x')
        >>> graph.mark_variable_as_graph_input(x)
        >>> w = graph.create_variable('w', torch.randn(4, 3, 1, 1), is_parameter=True)
        >>> conv = graph.create_operation('Conv', 'conv', inputs=[x, w],
        ...                               outputs=[graph.create_variable()])
        >>> tanh = graph.create_operation('Tanh', 'tanh', inputs=conv.outputs,
        ...                               outputs=[graph.create_variable()])
        >>> graph = quantize_graph(graph, 'ORT_INT8')
        >>> [type(op).__name__ for op in graph.operations.values()]
        ['QuantableOperation', 'Operation']
    """
    platform = as_platform(platform)
    check_float32(graph, 'quantize_graph')
    if not is_quantized_platform(platform):
        known = ', '.join(member.name for member in QUANTIZABLE_OP_TYPES)
        raise ValueError(f'platform {platform.name} is no quantized platform, nothing would '
                         f'be quantized; quantized ones: {known}')
    quantizer = quantizer_class(platform)(graph)
    dispatch_graph(graph, platform, dispatcher, dispatching_table)
    quantized = [op.name for op in graph.topological_sort() if op.platform is platform]
    _split_quantized_parameters(graph, platform)
    for name in quantized:
        quantizer.quantize_operation(name)
    quantizer.link_configs()
    if not quantized:
        _warn_nothing_quantized(graph, platform)
    return graph


def _split_quantized_parameters(graph: BaseGraph, platform: TargetPlatform) -> None:
    """Give each operation on ``platform`` its own copy of a parameter it shares with
    another operation (a module called twice, exported without ``FormatParameter``, as
    with ``passes=()``).

    A quantized operation keeps its parameters' fp32 values aside for itself (baking,
    the PTQ passes' :meth:`~razorlib.ir.QuantableOperation.set_parameter_value`), so a
    value shared with another reader would be parked by each reader in turn: a bias
    corrected for one reader moved the other's, and ``dequantize_graph`` gave one
    reader's quantized value back as the fp32 one.  The graph computes what it did.
    """
    for var in list(graph.variables.values()):
        if var.is_parameter and any(op.platform is platform for op in var.dest_ops):
            split_shared_parameter(graph, var)


def _listed(names: Iterable[str]) -> str:
    names = sorted(names)
    more = ', ...' if len(names) > _LISTED_TYPES else ''
    return (', '.join(names[:_LISTED_TYPES]) or 'none') + more


def _warn_nothing_quantized(graph: BaseGraph, platform: TargetPlatform) -> None:
    """Say that no operation of ``graph`` runs on ``platform``: a caller asking for an INT8
    model would otherwise get the FP32 graph back, and export it as a plain model, silently.
    """
    types = {op.type for op in graph.operations.values()}
    quantizable = QUANTIZABLE_OP_TYPES.get(platform, frozenset())
    present = types & quantizable
    if present:
        why = (f'its ops of types quantizable there ({_listed(present)}) were dispatched to '
               'other platforms (see the dispatcher and dispatching_table)')
    else:
        why = (f'none of its op types ({_listed(types)}) is quantizable there '
               f'({platform.name} quantizes {_listed(quantizable)})')
    warn_at_caller(f'quantize_graph: no operation of graph {graph.name!r} runs on '
                   f'{platform.name}, so the graph stays all in floating point: {why}')
