"""Checks of the integers a search space is built from (kernel sizes, depths, widths).

A config may say ``kernel_size=5.0`` (a float from arithmetic, a YAML ``5.0``) or
``depths=[('2', '3')]``; torch then fails deep inside a conv with a message that names
neither the module nor the key, or, worse, a mutable keeps ``5.0`` as a choice and a
subnet file exports it.  The search spaces and dynamic blocks call these first, before
they build anything, so the error names the module, the key and the value.  Values that
may be fractional (expand ratios, width ratios) are not checked here.
"""
import numbers
from typing import Any, Optional, Sequence, Tuple


def describe(value: Any) -> str:
    """``value`` and, for the usual mistakes, what it is: ``5.0 (a float; write 5)``."""
    if isinstance(value, bool):
        return f'{value!r} (a bool)'
    if isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral):
        as_float = float(value)
        if as_float.is_integer():
            return f'{value!r} (a float; write {int(as_float)})'
        return f'{value!r} (a float)'
    if isinstance(value, str):
        return f'{value!r} (a string)'
    return repr(value) if isinstance(value, numbers.Number) \
        else f'{value!r} (a {type(value).__name__})'


def is_integer(value: Any) -> bool:
    """An ``int`` (or numpy integer), not a bool, not a float even if whole."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def integer(value: Any, owner: str, key: str, minimum: Optional[int] = None) -> int:
    """``value`` as an ``int`` if it is an integer (>= ``minimum``).

    Raises:
        ValueError: ``OWNER: KEY must be an integer [>= MIN], got VALUE (a float; ...)``.

    Example:
        >>> integer(5, 'DynamicMBConv', 'kernel_sizes[1]', minimum=1)
        5
        >>> integer(5.0, 'DynamicMBConv', 'kernel_sizes[1]')
        Traceback (most recent call last):
        ...
        ValueError: DynamicMBConv: kernel_sizes[1] must be an integer, got 5.0 (a float; write 5)
    """
    bound = '' if minimum is None else f' >= {minimum}'
    if not is_integer(value) or (minimum is not None and value < minimum):
        raise ValueError(f'{owner}: {key} must be an integer{bound}, got {describe(value)}')
    return int(value)


def integers(values: Any, owner: str, key: str, minimum: Optional[int] = None) -> Tuple[int, ...]:
    """Every item of the sequence ``values`` checked by :func:`integer` (``KEY[i]``).

    The list may not be empty: each is the choices of a mutable (kernel sizes, depths),
    which has at least one; an empty one would fail inside the mutable without naming
    the key."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
        raise ValueError(f'{owner}: {key} must be a non-empty list of integers, '
                         f'got {describe(values)}')
    return tuple(integer(v, owner, f'{key}[{i}]', minimum) for i, v in enumerate(values))


def whole_number(value: Any, owner: str, key: str, minimum: int = 1) -> numbers.Real:
    """``value`` (unchanged) if it is a whole number >= ``minimum``, which may be
    written as a float (an expand ratio of ``6.0``).  Bools and strings are refused."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) \
            or not float(value).is_integer() or value < minimum:
        raise ValueError(f'{owner}: {key} must be a whole number >= {minimum}, '
                         f'got {describe(value)}')
    return value
