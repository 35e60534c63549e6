"""Dispatchers: one rule each for which operations go on the quantized platform.

Every dispatcher sees the same inputs: the graph, the quantized platform and the
operations already *pinned* (SOI subgraphs and :class:`DispatchingTable` overrides).  It
picks which of the other operations run quantized; the rest go to FP32.  The rules:

=============  ==============================================================================
conservative   type quantizable on the platform, and every quantizable input comes from a
               graph input, a parameter, a constant, an SOI op or an op already quantized
aggressive     type quantizable on the platform
pointwise      compute type (Conv, ConvTranspose, Gemm, MatMul) quantizable on the platform,
               or a point-wise op on a chain of point-wise ops from a quantized compute op
               to another one
allin          every operation
=============  ==============================================================================

Example:
    >>> from razorlib.ir import BaseGraph
    >>> graph = BaseGraph()
    >>> x = graph.create_variable('x')
    >>> graph.mark_variable_as_graph_input(x)
    >>> soft = graph.create_operation('Softmax', 'soft', inputs=[x],
    ...                               outputs=[graph.create_variable()])
    >>> add = graph.create_operation('Add', 'add', inputs=[soft.outputs[0], x],
    ...                              outputs=[graph.create_variable()])
    >>> {name: DISPATCHERS.build(dict(type=name)).dispatch(
    ...     graph, TargetPlatform.TRT_INT8, {})['add'].name
    ...  for name in ('aggressive', 'allin', 'conservative', 'pointwise')}
    {'aggressive': 'TRT_INT8', 'allin': 'TRT_INT8', 'conservative': 'FP32', 'pointwise': 'FP32'}
"""
import logging
from typing import ClassVar, Dict, List, Mapping, Optional, Set, Tuple, TypeVar

from ...ir import BaseGraph, Operation, TensorRole
from ...registry import DISPATCHERS
from ...utils.caller import warn_at_caller
from ..op_types import COMPUTE_TYPES, CONSTANT_TYPES, POINTWISE_TYPES
from ..platform import QUANTIZABLE_OP_TYPES, TargetPlatform

__all__ = [
    'AggressiveDispatcher', 'AllInDispatcher', 'ConservativeDispatcher', 'DISPATCHERS',
    'GraphDispatcher', 'PointwiseDispatcher', 'register_dispatcher'
]

logger = logging.getLogger(__name__)

Placement = Dict[str, TargetPlatform]
_NAMED_FALLBACKS = 3
"""How many of the ops the conservative rule leaves in FP32 its log line names."""
_DispatcherClass = TypeVar('_DispatcherClass', bound=type)


def register_dispatcher(cls: _DispatcherClass) -> _DispatcherClass:
    """Class decorator: register a dispatcher in :data:`~razorlib.registry.DISPATCHERS`
    under its class name and its short ``name``."""
    DISPATCHERS.register_module(name=[cls.__name__, cls.name], module=cls)
    return cls


class GraphDispatcher:
    """Base of the dispatchers: pinned operations keep their platform, :meth:`select` picks
    which of the others run quantized, everything else goes to FP32.

    Subclasses set ``name`` and implement :meth:`select`; register them with
    :func:`register_dispatcher` to make them known to ``dispatch_graph`` (and to configs)
    by class name and by ``name``.

    Example:
        >>> @register_dispatcher
        ... class NothingDispatcher(GraphDispatcher):
        ...     name = 'nothing'
        ...     def select(self, graph, platform, pinned):
        ...         return set()
        >>> DISPATCHERS.get('nothing') is DISPATCHERS.get('NothingDispatcher')
        True
        >>> for key in ('nothing', 'NothingDispatcher'):
        ...     del DISPATCHERS.module_dict[key]
    """
    name: ClassVar[str]

    def dispatch(self, graph: BaseGraph, platform: TargetPlatform,
                 pinned: Mapping[str, TargetPlatform]) -> Placement:
        """A platform for every operation of ``graph``.

        Args:
            graph: the graph; it is not changed.
            platform: the quantized platform.
            pinned: ``op name -> platform`` for the operations whose platform is decided.

        Returns:
            ``op name -> platform``, in graph order.
        """
        quantized = self.select(graph, platform, pinned)
        return {name: pinned.get(name, platform if name in quantized else TargetPlatform.FP32)
                for name in graph.operations}

    def select(self, graph: BaseGraph, platform: TargetPlatform,
               pinned: Mapping[str, TargetPlatform]) -> Set[str]:
        """Names of the operations, not pinned, that this rule puts on ``platform``."""
        raise NotImplementedError


def _data_inputs(op: Operation):
    """The inputs a quantizer may quantize: every input but shapes, indices and bounds."""
    return [var for var, role in zip(op.inputs, op.socket.inputs)
            if role is not TensorRole.NOT_QUANTIZED]


@register_dispatcher
class ConservativeDispatcher(GraphDispatcher):
    """Quantize an op of a quantizable type only when its inputs are quantized already.

    Rule: the op's type is quantizable on the platform, and every quantizable input comes
    from a graph input, a parameter, a constant, an SOI op or an op on the quantized
    platform.  Decided in topological order, so a quantized region grows from the graph
    inputs and stops at the first op that falls back to FP32; an Add fed by FP32 ops stays
    in FP32 rather than forming a lone int8 island.  Since that silently keeps whole
    regions in FP32 (a classifier head after an op the platform lacks), one INFO line per
    graph counts the ops of quantizable types left in FP32 and names the first few with
    the float op before each; nothing is logged when none is left.

    Example:
        >>> from razorlib.ir import BaseGraph
        >>> graph = BaseGraph()
        >>> x = graph.create_variable('x')
        >>> graph.mark_variable_as_graph_input(x)
        >>> soft = graph.create_operation('Softmax', 'soft', inputs=[x],
        ...                               outputs=[graph.create_variable()])
        >>> conv = graph.create_operation('Conv', 'conv', inputs=soft.outputs,
        ...                               outputs=[graph.create_variable()])
        >>> ConservativeDispatcher().select(graph, TargetPlatform.TRT_INT8, {})
        set()
    """
    name = 'conservative'

    def select(self, graph: BaseGraph, platform: TargetPlatform,
               pinned: Mapping[str, TargetPlatform]) -> Set[str]:
        quantizable = QUANTIZABLE_OP_TYPES[platform]
        placed: Placement = dict(pinned)
        fallbacks: List[Tuple[Operation, Operation]] = []  # (op, the float op before it)
        for op in graph.topological_sort():
            if op.name in placed:
                continue
            blocking = _float_source(op, placed, platform) if op.type in quantizable else None
            ready = op.type in quantizable and blocking is None
            placed[op.name] = platform if ready else TargetPlatform.FP32
            if blocking is not None:
                fallbacks.append((op, blocking))
        if fallbacks:
            _report_fallbacks(graph, platform, fallbacks,
                              sum(op.type in quantizable for op in graph.operations.values()))
        return {name for name, placed_on in placed.items()
                if placed_on is platform and name not in pinned}


def _float_source(op: Operation, placed: Placement,
                  platform: TargetPlatform) -> Optional[Operation]:
    """The first op writing a quantizable input of ``op`` off the quantized platform."""
    for var in _data_inputs(op):
        source = var.source_op
        if not (source is None or source.type in CONSTANT_TYPES
                or placed[source.name] in (platform, TargetPlatform.SOI)):
            return source
    return None


def _report_fallbacks(graph: BaseGraph, platform: TargetPlatform,
                      fallbacks: List[Tuple[Operation, Operation]], quantizable: int) -> None:
    """Log the ops left in FP32; warn when they are most of the quantizable ones (a ViT
    block after its first LayerNorm: an "INT8" model that would run nearly all in FP32)."""
    named = ', '.join(f'{op.name} ({op.type}, after {source.type} {source.name})'
                      for op, source in fallbacks[:_NAMED_FALLBACKS])
    more = ', ...' if len(fallbacks) > _NAMED_FALLBACKS else ''
    message = (f'conservative dispatch of graph {graph.name!r}: {len(fallbacks)} of '
               f'{quantizable} op(s) of types quantizable on {platform.name} left in FP32 '
               f'after a float op: {named}{more}')
    if 2 * len(fallbacks) > quantizable:
        warn_at_caller(f"{message}; dispatcher='aggressive' quantizes them, or pin ops "
                       'with dispatching_table')
    else:
        logger.info(message)


@register_dispatcher
class AggressiveDispatcher(GraphDispatcher):
    """Quantize every op whose type is quantizable on the platform.

    Rule: the op's type is in ``QUANTIZABLE_OP_TYPES[platform]``, whatever its neighbours.

    Example:
        >>> from razorlib.ir import BaseGraph
        >>> graph = BaseGraph()
        >>> x = graph.create_variable('x')
        >>> soft = graph.create_operation('Softmax', 'soft', inputs=[x],
        ...                               outputs=[graph.create_variable()])
        >>> conv = graph.create_operation('Conv', 'conv', inputs=soft.outputs,
        ...                               outputs=[graph.create_variable()])
        >>> AggressiveDispatcher().select(graph, TargetPlatform.TRT_INT8, {})
        {'conv'}
    """
    name = 'aggressive'

    def select(self, graph: BaseGraph, platform: TargetPlatform,
               pinned: Mapping[str, TargetPlatform]) -> Set[str]:
        quantizable = QUANTIZABLE_OP_TYPES[platform]
        return {name for name, op in graph.operations.items()
                if name not in pinned and op.type in quantizable}


@register_dispatcher
class PointwiseDispatcher(GraphDispatcher):
    """Quantize the compute ops and the point-wise ops that connect them.

    Rule: a compute op (Conv, ConvTranspose, Gemm, MatMul) quantizable on the platform is
    quantized.  A point-wise op (activations, element-wise arithmetic, BatchNormalization:
    :data:`~razorlib.quantization.op_types.POINTWISE_TYPES`) is quantized when it lies on a
    chain of point-wise ops that runs from a quantized compute op to another one, whatever
    the platform's own list says; anything else (pooling, Concat, Softmax, a point-wise tail
    after the last compute op) stays in FP32.

    Example:
        >>> from razorlib.ir import BaseGraph
        >>> graph = BaseGraph()
        >>> x = graph.create_variable('x')
        >>> first = graph.create_operation('Conv', 'first', inputs=[x],
        ...                                outputs=[graph.create_variable()])
        >>> tanh = graph.create_operation('Tanh', 'tanh', inputs=first.outputs,
        ...                               outputs=[graph.create_variable()])
        >>> second = graph.create_operation('Conv', 'second', inputs=tanh.outputs,
        ...                                 outputs=[graph.create_variable()])
        >>> relu = graph.create_operation('Relu', 'relu', inputs=second.outputs,
        ...                               outputs=[graph.create_variable()])
        >>> sorted(PointwiseDispatcher().select(graph, TargetPlatform.TRT_INT8, {}))
        ['first', 'second', 'tanh']
    """
    name = 'pointwise'

    def select(self, graph: BaseGraph, platform: TargetPlatform,
               pinned: Mapping[str, TargetPlatform]) -> Set[str]:
        compute_types = COMPUTE_TYPES & QUANTIZABLE_OP_TYPES[platform]
        compute = {op for name, op in graph.operations.items()
                   if op.type in compute_types and pinned.get(name, platform) is platform}
        chain = {op for name, op in graph.operations.items()
                 if op.type in POINTWISE_TYPES and pinned.get(name, platform) is platform}
        order = graph.topological_sort()
        downstream = set(compute)  # compute ops and the chain ops they feed
        for op in order:
            if op in chain and any(var.source_op in downstream for var in _data_inputs(op)):
                downstream.add(op)
        upstream = set(compute)  # compute ops and the chain ops that feed them
        for op in reversed(order):
            if op in chain and any(reader in upstream
                                   for var in op.outputs for reader in var.dest_ops):
                upstream.add(op)
        return {op.name for op in downstream & upstream if op.name not in pinned}


@register_dispatcher
class AllInDispatcher(GraphDispatcher):
    """Quantize every operation that is not pinned (SOI ops and table overrides are).

    Rule: everything goes on the quantized platform, whatever its type; useful to measure
    the accuracy floor of full quantization, or for platforms that quantize all ops.

    Example:
        >>> from razorlib.ir import BaseGraph
        >>> graph = BaseGraph()
        >>> x = graph.create_variable('x')
        >>> soft = graph.create_operation('Softmax', 'soft', inputs=[x],
        ...                               outputs=[graph.create_variable()])
        >>> AllInDispatcher().select(graph, TargetPlatform.TRT_INT8, {})
        {'soft'}
    """
    name = 'allin'

    def select(self, graph: BaseGraph, platform: TargetPlatform,
               pinned: Mapping[str, TargetPlatform]) -> Set[str]:
        return {name for name in graph.operations if name not in pinned}
