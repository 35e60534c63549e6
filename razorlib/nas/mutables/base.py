"""MutableChoice: the base of every mutable, a module that takes one of a few choices."""
from typing import Any, Hashable, Optional, Sequence, Tuple

import torch.nn as nn

Choice = Hashable


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

    def __init__(self, choices: Sequence[Choice], init_choice: Optional[Choice] = None):
        super().__init__()
        choices = tuple(choices)
        if not choices:
            raise ValueError(f'{type(self).__name__} needs at least one choice')
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
        """``choice`` if it is one of ``choices``.

        Raises:
            ValueError: naming the choice and listing the valid ones.
        """
        if isinstance(choice, bool) or choice not in self._choices:
            raise ValueError(f'{choice!r} is not a choice of this {type(self).__name__}; '
                             f'its choices are {self._choices}')
        return choice

    def extra_repr(self) -> str:
        return f'choices={self._choices}, current_choice={self._current!r}'
