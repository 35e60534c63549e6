"""OneShotMutableValue: a value (kernel size, expand ratio, depth) that a block reads."""
from typing import Optional, Sequence

from ...registry import MUTABLES
from .base import MutableChoice


@MUTABLES.register_module()
class OneShotMutableValue(MutableChoice):
    """A number a dynamic block reads at run time: its kernel size, its expand ratio, or
    how many blocks of a stage run (BigNAS / OFA / AutoFormer style values).

    It holds no weights: the block that owns it (e.g.
    :class:`~razorlib.nas.DynamicMBConv`) keeps the weights of its largest choice and
    uses the part the current value selects, so every value shares weights.  In a fixed
    subnet the block becomes a plain module of the chosen value and the mutable
    disappears.

    Args:
        choices: the numbers it may take; sorted, so ``choices[0]`` is the smallest.
        init_choice: the value it starts with; default the largest.
        integer: the values are integers (a kernel size, a depth): a float choice, or a
            float set later (a subnet file's ``5.0``), is refused.  Without it the
            values may be floats (an expand ratio), and ``3.0`` names a choice ``3``.

    Example:
        >>> kernel = OneShotMutableValue([7, 3, 5])
        >>> kernel.choices, kernel.current_choice
        ((3, 5, 7), 7)
        >>> OneShotMutableValue([3, 5], integer=True).current_choice = 5.0
        Traceback (most recent call last):
        ...
        ValueError: 5.0 is not a choice of this OneShotMutableValue; its choices are (3, 5), ...
    """

    def __init__(self, choices: Sequence[int], init_choice: Optional[int] = None,
                 integer: bool = False):
        if any(isinstance(c, bool) or not isinstance(c, (int, float)) for c in choices):
            raise TypeError(f'OneShotMutableValue takes numbers, got {tuple(choices)}')
        if not choices:  # before ordered[-1] below fails as a bare IndexError
            raise ValueError('OneShotMutableValue needs at least one choice')
        ordered = sorted(choices)
        super().__init__(ordered, ordered[-1] if init_choice is None else init_choice,
                         integer=integer)

    @property
    def max_choice(self) -> int:
        return self.choices[-1]
