"""Variable: an edge of the graph IR, the tensor one operation writes and others read.

A variable knows its producer (``source_op``, at most one) and its consumers
(``dest_ops``, an operation that reads the variable twice appears twice).  Parameters and
constants carry their tensor in ``value``; activations have ``value=None`` until an
executor runs the graph.  The links are kept in agreement with the operations' ``inputs``
and ``outputs`` by :class:`~razorlib.ir.graph.BaseGraph`; a bare variable is unlinked.
"""
from typing import TYPE_CHECKING, Any, List, Optional, Sequence, Tuple, Union

import torch

if TYPE_CHECKING:
    from .operation import Operation

__all__ = ['Dim', 'EMPTY_NAME', 'Variable']

Dim = Union[int, str, None]
"""One entry of a shape: a size, a symbolic name (``'batch'``) or None for unknown."""

EMPTY_NAME = ''
"""The name of the variable standing for an absent optional input, as in ONNX: nothing
produces it and executors read it as None."""


def _as_shape(shape: Optional[Sequence[Dim]], owner: str) -> Optional[Tuple[Dim, ...]]:
    if shape is None:
        return None
    entries = tuple(shape)
    for entry in entries:
        if not (entry is None or isinstance(entry, (int, str))) or isinstance(entry, bool):
            raise TypeError(f'variable {owner!r}: shape entry {entry!r} is not an int, a str '
                            'or None')
    return entries


class Variable:
    """An edge of the graph: one tensor, its producer and its consumers.

    Args:
        name: unique name of the variable inside its graph.
        value: the tensor of a parameter or constant; None for an activation.  Anything
            ``torch.as_tensor`` accepts is converted.
        is_parameter: whether the variable is a parameter (a weight, a bias, a constant
            input of an operation) rather than an activation.
        shape: the shape to report while ``value`` is None; entries are ints, symbolic
            names or None.  A variable with a value reports the value's shape.
        dtype: the dtype to report while ``value`` is None.

    Example:
        >>> import torch
        >>> weight = Variable('conv.weight', torch.zeros(8, 3, 3, 3), is_parameter=True)
        >>> weight.shape, weight.dtype
        ((8, 3, 3, 3), torch.float32)
        >>> Variable('x', shape=('batch', 3, None, None)).shape
        ('batch', 3, None, None)
    """

    def __init__(self, name: str, value: Any = None,
                 is_parameter: bool = False, shape: Optional[Sequence[Dim]] = None,
                 dtype: Optional[torch.dtype] = None) -> None:
        self.name = name
        self.value = value
        self.is_parameter = is_parameter
        self.shape = shape
        self.dtype = dtype
        self.source_op: Optional['Operation'] = None
        self.dest_ops: List['Operation'] = []

    @property
    def value(self) -> Optional[torch.Tensor]:
        """The tensor of a parameter or constant, None for an activation not yet run."""
        return self._value

    @value.setter
    def value(self, value: Any) -> None:
        if value is not None and not isinstance(value, torch.Tensor):
            value = torch.as_tensor(value)
        self._value = value

    @property
    def is_parameter(self) -> bool:
        """Whether the variable is a parameter or constant rather than an activation."""
        return self._is_parameter

    @is_parameter.setter
    def is_parameter(self, is_parameter: bool) -> None:
        self._is_parameter = bool(is_parameter)

    @property
    def shape(self) -> Optional[Tuple[Dim, ...]]:
        """The value's shape when there is a value, else the stored shape (or None)."""
        if self._value is not None:
            return tuple(self._value.shape)
        return self._shape

    @shape.setter
    def shape(self, shape: Optional[Sequence[Dim]]) -> None:
        self._shape = _as_shape(shape, self.name)

    @property
    def fed_shape(self) -> Optional[Tuple[Dim, ...]]:
        """The shape a tensor fed for this variable (a graph input) must fit: its declared
        shape, also where it holds a value (a default that a fed tensor overrides: ``('N',)``
        for a default of 3 elements), unless the value no longer fits it (a default replaced
        since), which then gives its own.

        Example:
            >>> import torch
            >>> Variable('bias', torch.zeros(3), shape=('N', )).fed_shape
            ('N',)
            >>> Variable('bias', torch.zeros(2, 3), shape=('N', )).fed_shape
            (2, 3)
        """
        declared, shape = self._shape, self.shape
        fits = (declared is not None and shape is not None and len(declared) == len(shape)
                and all(not isinstance(want, int) or want == size
                        for want, size in zip(declared, shape)))
        return declared if fits else shape

    @property
    def dtype(self) -> Optional[torch.dtype]:
        """The value's dtype when there is a value, else the stored dtype (or None)."""
        if self._value is not None:
            return self._value.dtype
        return self._dtype

    @dtype.setter
    def dtype(self, dtype: Optional[torch.dtype]) -> None:
        if dtype is not None and not isinstance(dtype, torch.dtype):
            raise TypeError(f'variable {self.name!r}: dtype {dtype!r} is not a torch.dtype')
        self._dtype = dtype

    def copy(self, copy_value: bool = False) -> 'Variable':
        """An unlinked copy: same name, shape, dtype and parameter flag, no producer or consumers.

        Args:
            copy_value: clone the tensor; by default the copy shares this variable's tensor.

        Returns:
            The new variable.
        """
        value = self._value
        if copy_value and value is not None:
            value = value.detach().clone()
        return Variable(self.name, value, self._is_parameter, self._shape, self._dtype)

    def __repr__(self) -> str:
        source = self.source_op.name if self.source_op is not None else None
        dests = [op.name for op in self.dest_ops]
        kind = 'parameter' if self._is_parameter else 'activation'
        return (f'Variable(name={self.name!r}, {kind}, shape={self.shape}, '
                f'source_op={source!r}, dest_ops={dests})')
