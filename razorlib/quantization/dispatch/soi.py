"""Shape-or-index (SOI) subgraphs: the operations that compute shapes, indices and other
control values, which are never quantized.

Two sweeps over the graph, both driven by the op sockets of :mod:`razorlib.ir.opsocket`:

- **Forward**, in topological order.  An *index producer* (an op whose every output is
  ``NOT_QUANTIZED``: Shape, Size, NonZero, ArgMax, Range, ...) is SOI.  So is an op whose
  quantizable inputs all hold SOI values or constants, at least one of them an SOI value:
  ``Shape -> Gather -> Cast -> Div`` computes from a shape, all of it.  An SOI value is an
  output of an SOI op, or a ``NOT_QUANTIZED`` output of any op (TopK's indices).
- **Backward**, in reverse topological order.  An op is SOI when all that reads its outputs
  reads them as control values: at a ``NOT_QUANTIZED`` input (Reshape's shape, Resize's
  scales, Slice's starts, Gather's indices, ...), or as the input of an SOI op that is not an
  index producer.  None of its outputs may be a graph output.  ``Concat -> Reshape.shape``
  makes the Concat SOI, then what only feeds the Concat, and so on upstream.

Index producers stop the backward sweep: Shape reads its input's shape, not its data, so the
op computing that input stays where it is.
"""
from typing import List, Set

from ...ir import BaseGraph, Operation, TensorRole, Variable
from ..op_types import CONSTANT_TYPES

__all__ = ['find_soi_operations', 'is_index_producer']

_CONTROL = TensorRole.NOT_QUANTIZED


def is_index_producer(op: Operation) -> bool:
    """Whether every output of ``op`` is a shape or index (``NOT_QUANTIZED`` in its socket).

    Example:
        >>> from razorlib.ir import BaseGraph
        >>> graph = BaseGraph()
        >>> x = graph.create_variable('x')
        >>> shape = graph.create_operation('Shape', inputs=[x], outputs=[graph.create_variable()])
        >>> relu = graph.create_operation('Relu', inputs=[x], outputs=[graph.create_variable()])
        >>> is_index_producer(shape), is_index_producer(relu)
        (True, False)
    """
    outputs = op.socket.outputs
    return bool(outputs) and all(role is _CONTROL for role in outputs)


def find_soi_operations(graph: BaseGraph) -> List[Operation]:
    """The operations of ``graph`` that compute shapes, indices or other control values.

    Args:
        graph: the graph; it is not changed.

    Returns:
        The SOI operations, in topological order.

    Example:
        >>> import torch
        >>> from razorlib.ir import BaseGraph
        >>> graph = BaseGraph()
        >>> x = graph.create_variable('x', shape=(1, 8))
        >>> graph.mark_variable_as_graph_input(x)
        >>> size = graph.create_operation('Shape', 'shape', inputs=[x],
        ...                               outputs=[graph.create_variable('s')])
        >>> flat = graph.create_variable('flat', torch.tensor([-1]), is_parameter=True)
        >>> concat = graph.create_operation('Concat', 'concat', inputs=[flat],
        ...                                 outputs=[graph.create_variable('new_shape')])
        >>> reshape = graph.create_operation('Reshape', 'reshape',
        ...                                  inputs=[x, concat.outputs[0]],
        ...                                  outputs=[graph.create_variable('y')])
        >>> [op.name for op in find_soi_operations(graph)]
        ['shape', 'concat']
    """
    order = graph.topological_sort()
    soi: Set[Operation] = set()
    for op in order:
        if is_index_producer(op) or _computes_from_soi(graph, op, soi):
            soi.add(op)
    for op in reversed(order):
        if op not in soi and _read_only_as_control(graph, op, soi):
            soi.add(op)
    return [op for op in order if op in soi]


def _is_soi_value(var: Variable, soi: Set[Operation]) -> bool:
    source = var.source_op
    if source is None:
        return False
    return source in soi or source.socket.outputs[source.outputs.index(var)] is _CONTROL


def _computes_from_soi(graph: BaseGraph, op: Operation, soi: Set[Operation]) -> bool:
    data = [var for var, role in zip(op.inputs, op.socket.inputs) if role is not _CONTROL]
    soi_values = [_is_soi_value(var, soi) for var in data]
    return any(soi_values) and all(
        is_soi or _is_constant(graph, var) for var, is_soi in zip(data, soi_values))


def _is_constant(graph: BaseGraph, var: Variable) -> bool:
    """A parameter, an absent optional input, or the output of a constant-producing op."""
    if var.source_op is None:
        return var.name not in graph.inputs
    return var.source_op.type in CONSTANT_TYPES


def _read_only_as_control(graph: BaseGraph, op: Operation, soi: Set[Operation]) -> bool:
    reads = [(reader, index) for var in op.outputs for reader in _unique(var.dest_ops)
             for index, read in enumerate(reader.inputs) if read is var]
    if not reads or any(var.name in graph.outputs for var in op.outputs):
        return False
    return all(reader.socket.inputs[index] is _CONTROL
               or (reader in soi and not is_index_producer(reader)) for reader, index in reads)


def _unique(items):
    return list(dict.fromkeys(items))
