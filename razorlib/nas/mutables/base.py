"""MutableChoice: the base of every mutable, a module that takes one of a few choices."""
from typing import Any, Hashable, Optional, Sequence, Tuple

import torch.nn as nn

from ..checks import describe, is_integer

Choice = Hashable
_MISSING = object()


class MutableChoice(nn.Module):
    """A module with a fixed list of ``choices`` and the one it currently takes.

    A search space is made of these: a search-space object
    (:class:`~razorlib.nas.NasMutator`) finds them in a model, by their module names,
    and samples, sets and exports their choices.  Setting a choice that is not among
    ``choices`` raises an error that names it and the choices, so a subnet file with a
    typo is refused instead of silently building another network.

    Args:
        choices: the values this mutable can take (op names, kernel sizes, ...); at
            least one, all distinct.
        init_choice: the choice it starts with; default the first.
        integer: the choices are integers (a kernel size, a depth, a channel count):
            each must be an ``int``, and so must a choice set later (``5.0`` and
            ``True`` are refused, naming the value).

    Example:
        >>> mutable = MutableChoice([3, 5, 7])
        >>> mutable.current_choice = 5
        >>> mutable.current_choice
        5
        >>> mutable.current_choice = 9
        Traceback (most recent call last):
        ...
        ValueError: 9 is not a choice of this MutableChoice; its choices are (3, 5, 7)
    """

    def __init__(self, choices: Sequence[Choice], init_choice: Optional[Choice] = None,
                 integer: bool = False):
        super().__init__()
        choices = tuple(choices)
        if not choices:
            raise ValueError(f'{type(self).__name__} needs at least one choice')
        self.integer = integer
        if integer:
            for index, choice in enumerate(choices):
                if not is_integer(choice):
                    raise ValueError(f'{type(self).__name__}: choices[{index}] must be an '
                                     f'integer, got {describe(choice)}')
        if len(set(choices)) != len(choices):
            raise ValueError(f'{type(self).__name__} choices must be distinct, got {choices}')
        self._choices: Tuple[Choice, ...] = choices
        self._current: Choice = choices[0]
        if init_choice is not None:
            self.current_choice = init_choice

    @property
    def choices(self) -> Tuple[Choice, ...]:
        return self._choices

    @property
    def current_choice(self) -> Choice:
        return self._current

    @current_choice.setter
    def current_choice(self, choice: Choice) -> None:
        self._current = self.check_choice(choice)

    def check_choice(self, choice: Any) -> Choice:
        """The one of ``choices`` that ``choice`` names (the stored choice itself, so
        ``1`` for a choice ``1.0`` is that float).

        A bool is never a choice, and a mutable of ``integer`` choices (a kernel size,
        a depth, a channel count) takes integers only: ``5.0`` is refused where the
        choices are ``(3, 5, 7)``, so a subnet file cannot set a float where a block
        needs an int.

        Raises:
            ValueError: naming the choice and listing the valid ones.
        """
        matched = _MISSING if isinstance(choice, bool) else \
            next((known for known in self._choices if known == choice), _MISSING)
        if matched is _MISSING or (getattr(self, 'integer', False) and not is_integer(choice)):
            hint = '' if matched is _MISSING else \
                f', integers: write {matched!r}, not {choice!r}'
            raise ValueError(f'{choice!r} is not a choice of this {type(self).__name__}; '
                             f'its choices are {self._choices}{hint}')
        return matched

    def extra_repr(self) -> str:
        return f'choices={self._choices}, current_choice={self._current!r}'
