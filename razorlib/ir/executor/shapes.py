"""Graph input shapes: the check executors run on every input, and symbolic (dynamic) axes.

A graph input's shape holds ints for fixed axes and names (``'batch'``) or None for
dynamic ones.  An executor refuses a tensor whose rank differs or whose size differs on a
fixed axis, instead of computing a result of the wrong shape; dynamic axes take any size.
"""
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from ..variable import Dim, Variable

__all__ = ['InputDtypeError', 'InputShapeError', 'check_input_dtype', 'check_input_shape',
           'dynamic_axes', 'grow_along', 'merge_shape']


class InputShapeError(ValueError):
    """A tensor given for a graph input does not have the input's shape.

    Args:
        graph_name: the graph's name.
        input_name: the graph input's name.
        expected: the input's shape (names or None for dynamic axes).
        given: the tensor's shape.
        where: what gave the tensor (``'calibration batch 3'``), for the message.

    Example:
        >>> print(InputShapeError('g', 'x', (1, 3), (540, 3)))
        graph 'g': input 'x' expects shape (1, 3), got (540, 3); axis 0 is fixed to 1 (export \
the model with dynamic_batch=True to run other batch sizes)
    """

    def __init__(self, graph_name: str, input_name: str, expected: Sequence[Dim],
                 given: Sequence[int], where: Optional[str] = None) -> None:
        self.graph_name, self.input_name = graph_name, input_name
        self.expected, self.given = tuple(expected), tuple(given)
        prefix = f'{where}: ' if where else ''
        if len(self.expected) != len(self.given):
            detail = f'a tensor of rank {len(self.expected)} is needed'
        else:
            axis = next(axis for axis, (want, got) in enumerate(zip(self.expected, self.given))
                        if isinstance(want, int) and want != got)
            detail = f'axis {axis} is fixed to {self.expected[axis]}'
            if axis == 0:
                detail += ' (export the model with dynamic_batch=True to run other batch sizes)'
        super().__init__(f'{prefix}graph {graph_name!r}: input {input_name!r} expects shape '
                         f'{_shape_text(self.expected)}, got {_shape_text(self.given)}; '
                         f'{detail}')

    def __reduce__(self):
        return type(self), (self.graph_name, self.input_name, self.expected, self.given)


def _shape_text(shape: Sequence[Dim]) -> str:
    inner = ', '.join('?' if size is None else str(size) if isinstance(size, int) else size
                      for size in shape)
    return f'({inner},)' if len(shape) == 1 else f'({inner})'


def check_input_shape(graph_name: str, var: Variable, tensor: torch.Tensor,
                      where: Optional[str] = None) -> None:
    """Raise :class:`InputShapeError` if ``tensor`` does not fit graph input ``var``.

    An input with no recorded shape takes any tensor; one holding a default value takes
    tensors of its declared shape (:attr:`~razorlib.ir.variable.Variable.fed_shape`).

    Example:
        >>> x = Variable('x', shape=('batch', 3))
        >>> check_input_shape('g', x, torch.zeros(540, 3))
        >>> check_input_shape('g', x, torch.zeros(540, 4))
        Traceback (most recent call last):
        ...
        razorlib.ir.executor.shapes.InputShapeError: graph 'g': input 'x' expects shape \
(batch, 3), got (540, 4); axis 1 is fixed to 3
    """
    expected = var.fed_shape
    if expected is None:
        return
    given = tuple(tensor.shape)
    if len(given) != len(expected) or any(isinstance(want, int) and want != got
                                          for want, got in zip(expected, given)):
        raise InputShapeError(graph_name, var.name, expected, given, where)


class InputDtypeError(TypeError):
    """A tensor given for a graph input has a dtype the input does not take.

    Args:
        graph_name: the graph's name.
        input_name: the graph input's name.
        expected: the input's recorded dtype.
        given: the tensor's dtype.
        where: what gave the tensor (``'calibration batch 3'``), for the message.

    Example:
        >>> print(InputDtypeError('g', 'x', torch.float32, torch.int64))
        graph 'g': input 'x' expects dtype torch.float32, got torch.int64; convert the tensor \
(tensor.to(torch.float32), after any scaling an integer image needs)
    """

    def __init__(self, graph_name: str, input_name: str, expected: torch.dtype,
                 given: torch.dtype, where: Optional[str] = None) -> None:
        self.graph_name, self.input_name = graph_name, input_name
        self.expected, self.given = expected, given
        self.where = where
        prefix = f'{where}: ' if where else ''
        advice = f'tensor.to({expected})'
        if _dtype_kind(given) == 'int' and _dtype_kind(expected) == 'float':
            advice += ', after any scaling an integer image needs'
        super().__init__(f'{prefix}graph {graph_name!r}: input {input_name!r} expects dtype '
                         f'{expected}, got {given}; convert the tensor ({advice})')

    def __reduce__(self):
        return type(self), (self.graph_name, self.input_name, self.expected, self.given,
                            self.where)


def _dtype_kind(dtype: torch.dtype) -> str:
    if dtype == torch.bool:
        return 'bool'
    if dtype.is_complex:
        return 'complex'
    return 'float' if dtype.is_floating_point else 'int'


def check_input_dtype(graph_name: str, var: Variable, tensor: torch.Tensor,
                      where: Optional[str] = None) -> torch.Tensor:
    """``tensor`` in the dtype of graph input ``var``, or :class:`InputDtypeError`.

    A tensor of another dtype is cast only when the cast is exact and of the same kind
    (a float16 or bfloat16 batch for a float32 input, int32 token ids for an int64 input):
    it then holds the very values the caller meant.  Any other dtype is an error: an
    integer batch for a float input is most often an image not yet scaled, and float64
    to float32 rounds.  An input with no recorded dtype takes any tensor.

    Example:
        >>> x = Variable('x', dtype=torch.float32)
        >>> check_input_dtype('g', x, torch.ones(2, dtype=torch.float16)).dtype
        torch.float32
        >>> check_input_dtype('g', x, torch.ones(2, dtype=torch.float64), 'batch 1')
        Traceback (most recent call last):
        ...
        razorlib.ir.executor.shapes.InputDtypeError: batch 1: graph 'g': input 'x' expects \
dtype torch.float32, got torch.float64; convert the tensor (tensor.to(torch.float32))
    """
    expected, given = var.dtype, tensor.dtype
    if expected is None or given == expected:
        return tensor
    if _dtype_kind(given) == _dtype_kind(expected) and \
            torch.promote_types(given, expected) == expected:
        return tensor.to(expected)
    raise InputDtypeError(graph_name, var.name, expected, given, where)


def dynamic_axes(var: Variable) -> List[int]:
    """The axes of ``var``'s shape that are not fixed (names or None)."""
    return [] if var.shape is None else [axis for axis, size in enumerate(var.shape)
                                         if not isinstance(size, int)]


def grow_along(tensor: torch.Tensor, axes: Sequence[int]) -> torch.Tensor:
    """``tensor`` one element longer on each of ``axes`` (its first slice repeated).

    Example:
        >>> grow_along(torch.tensor([[1, 2]]), [0])
        tensor([[1, 2],
                [1, 2]])
    """
    for axis in axes:
        tensor = torch.cat([tensor, tensor.narrow(axis, 0, 1)], axis)
    return tensor


def merge_shape(known: Optional[Tuple[Dim, ...]], traced: Tuple[int, ...],
                other: Optional[Tuple[int, ...]], names: Dict[int, str],
                owner: str) -> Tuple[Dim, ...]:
    """The shape to record for a variable traced at ``traced`` (and at ``other`` with the
    dynamic input axes one longer).

    An axis keeps a name it already had; an axis whose size changed between the two runs
    becomes dynamic, named after the input axis of that size (``names``: size -> name) or
    ``<owner>_dim<axis>``; every other axis gets its traced size.

    Example:
        >>> merge_shape(None, (1, 10), (2, 10), {1: 'batch'}, 'logits')
        ('batch', 10)
        >>> merge_shape(('n', 10), (1, 10), None, {}, 'logits')
        ('n', 10)
    """
    shape: List[Dim] = list(traced)
    for axis, size in enumerate(traced):
        if known is not None and len(known) == len(traced) and not isinstance(known[axis], int) \
                and known[axis] is not None:
            shape[axis] = known[axis]
        elif other is not None and len(other) == len(traced) and other[axis] != size:
            shape[axis] = names.get(size, f'{owner}_dim{axis}')
    return tuple(shape)
