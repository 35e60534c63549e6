"""Structural comparison of two graphs: what an ONNX round trip must keep.

Two graphs are structurally identical when they have the same name, the same graph
inputs and outputs (in order), the same operations (by name: type, opset, attributes,
input and output variable names in order) and the same variables (by name: parameter
flag, shape, dtype and equal values).  The order operations and variables were added in,
platforms, quantization configs and ``extension_attrib`` are not compared.
"""
from typing import TYPE_CHECKING, Any, Dict, List

import torch

if TYPE_CHECKING:
    from .graph import BaseGraph
    from .operation import Operation
    from .variable import Variable

__all__ = ['graphs_structurally_equal', 'structural_differences']


def structural_differences(first: 'BaseGraph', second: 'BaseGraph') -> List[str]:
    """Every structural difference between two graphs, one readable line each.

    Args:
        first: a graph.
        second: the graph to compare it with.

    Returns:
        The differences (empty when the graphs are structurally identical).

    Example:
        >>> from razorlib.ir import BaseGraph
        >>> first, second = BaseGraph('g'), BaseGraph('g')
        >>> for graph in (first, second):
        ...     x = graph.create_variable('x')
        ...     _ = graph.create_operation('Relu', 'relu', inputs=[x])
        >>> second.operations['relu'].attributes['alpha'] = 0.5
        >>> structural_differences(first, second)
        ["operation 'relu': attributes {} != {'alpha': 0.5}"]
    """
    problems = []
    if first.name != second.name:
        problems.append(f'graph name {first.name!r} != {second.name!r}')
    for kind in ('inputs', 'outputs'):
        names = list(getattr(first, kind)), list(getattr(second, kind))
        if names[0] != names[1]:
            problems.append(f'graph {kind} {names[0]} != {names[1]}')
    problems += _table_differences('operation', first.operations, second.operations,
                                   _operation_differences)
    problems += _table_differences('variable', first.variables, second.variables,
                                   _variable_differences)
    return problems


def graphs_structurally_equal(first: 'BaseGraph', second: 'BaseGraph') -> bool:
    """Whether two graphs are structurally identical (see :func:`structural_differences`).

    Example:
        >>> from razorlib.ir import BaseGraph
        >>> graphs_structurally_equal(BaseGraph('a'), BaseGraph('a'))
        True
    """
    return not structural_differences(first, second)


def _table_differences(kind: str, first: Dict[str, Any], second: Dict[str, Any],
                       compare) -> List[str]:
    problems = [f'{kind} {name!r} is only in the {side} graph'
                for side, names in (('first', first.keys() - second.keys()),
                                    ('second', second.keys() - first.keys()))
                for name in sorted(names)]
    for name in first.keys() & second.keys():
        problems += [f'{kind} {name!r}: {line}' for line in compare(first[name], second[name])]
    return sorted(problems)


def _operation_differences(first: 'Operation', second: 'Operation') -> List[str]:
    problems = []
    for field in ('type', 'opset'):
        if getattr(first, field) != getattr(second, field):
            problems.append(f'{field} {getattr(first, field)!r} != {getattr(second, field)!r}')
    if not _values_equal(first.attributes, second.attributes):
        problems.append(f'attributes {first.attributes!r} != {second.attributes!r}')
    for side in ('inputs', 'outputs'):
        names = ([var.name for var in getattr(first, side)],
                 [var.name for var in getattr(second, side)])
        if names[0] != names[1]:
            problems.append(f'{side} {names[0]} != {names[1]}')
    return problems


def _variable_differences(first: 'Variable', second: 'Variable') -> List[str]:
    problems = [f'{field} {getattr(first, field)!r} != {getattr(second, field)!r}'
                for field in ('is_parameter', 'shape', 'dtype')
                if getattr(first, field) != getattr(second, field)]
    if not _values_equal(first.value, second.value):
        problems.append('values differ')
    return problems


def _values_equal(first: Any, second: Any) -> bool:
    """Equality of attribute values and tensors: tensors by dtype, shape and bits."""
    if isinstance(first, torch.Tensor) or isinstance(second, torch.Tensor):
        return (isinstance(first, torch.Tensor) and isinstance(second, torch.Tensor)
                and first.dtype == second.dtype and first.shape == second.shape
                and torch.equal(_bytes(first), _bytes(second)))
    if isinstance(first, dict) and isinstance(second, dict):
        return first.keys() == second.keys() and all(
            _values_equal(first[key], second[key]) for key in first)
    if isinstance(first, (list, tuple)) and isinstance(second, (list, tuple)):
        return len(first) == len(second) and all(map(_values_equal, first, second))
    return type(first) is type(second) and first == second


def _bytes(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8)
