"""OneShotMutableChannel: how many of its hidden channels a dynamic op uses (a width)."""
from typing import Optional, Sequence, Union

from ...registry import MUTABLES
from ..checks import describe, is_integer
from .base import MutableChoice

Width = Union[int, float]
MODES = ('ratio', 'number')


@MUTABLES.register_module()
class OneShotMutableChannel(MutableChoice):
    """A width searched inside an op: how many of ``num_channels`` it uses.

    AutoSlim searches the widths of a whole model through its pruner (every layer's
    kept channels, ``razorlib.engine.loops.WidthSpace``).  This is the one-shot NAS
    counterpart, local to one op: a dynamic block (e.g.
    :class:`~razorlib.nas.DynamicShuffleBlock`) holds the weights of ``num_channels``
    channels and uses the first :attr:`current_channels` of them, so every width shares
    weights (as SPOS's channel search and OFA).  It nests like any mutable: as a
    candidate op's own width, it counts only when that op is chosen.  In a fixed subnet
    the block becomes a plain module of that width and the mutable disappears.

    Args:
        num_channels: the widest choice's channels: what the block's weights hold.
        choices: ratios of ``num_channels`` in (0, 1] (``mode='ratio'``), or channel
            counts in [1, ``num_channels``] (``mode='number'``: integers, ``8.0`` is
            refused); sorted, narrowest first.  Each must give its own channel count.
        mode: ``'ratio'`` or ``'number'``: what a subnet file writes for this width.
        init_choice: the choice it starts with; default the widest.

    Example:
        >>> width = OneShotMutableChannel(16, [1.0, 0.5, 0.75])
        >>> width.choices, width.current_channels
        ((0.5, 0.75, 1.0), 16)
        >>> width.current_choice = 0.75
        >>> width.current_channels
        12
        >>> OneShotMutableChannel(16, [0.5, 0.52])
        Traceback (most recent call last):
        ...
        ValueError: OneShotMutableChannel of 16 channels: the ratios 0.5 and 0.52 both keep ...
    """

    def __init__(self, num_channels: int, choices: Sequence[Width], mode: str = 'ratio',
                 init_choice: Optional[Width] = None):
        if mode not in MODES:
            raise ValueError(f'OneShotMutableChannel mode must be one of {MODES}, got {mode!r}')
        if not is_integer(num_channels) or num_channels < 1:
            raise ValueError(f'OneShotMutableChannel num_channels must be a positive int, '
                             f'got {describe(num_channels)}')
        self.num_channels, self.mode = int(num_channels), mode
        if not choices:  # before ordered[-1] below fails as a bare IndexError
            raise ValueError(f'OneShotMutableChannel of {num_channels} channels needs at '
                             'least one choice')
        for index, choice in enumerate(choices):
            try:
                self.channels(choice)
            except ValueError as err:
                raise ValueError(f'OneShotMutableChannel of {num_channels} channels: '
                                 f'choices[{index}]: {err}') from None
        ordered = sorted(choices)
        counts = {}
        for choice in ordered:
            count = self.channels(choice)
            if count in counts:
                raise ValueError(f'OneShotMutableChannel of {num_channels} channels: the '
                                 f'{mode}s {counts[count]} and {choice} both keep {count} '
                                 'channels')
            counts[count] = choice
        super().__init__(ordered, ordered[-1] if init_choice is None else init_choice,
                         integer=mode == 'number')

    def channels(self, choice: Width) -> int:
        """The channel count ``choice`` stands for.

        Raises:
            ValueError: a ratio outside (0, 1] or a count outside [1, num_channels].
        """
        if isinstance(choice, bool) or not isinstance(choice, (int, float)):
            raise ValueError(f'a width is a number, got {describe(choice)}')
        if self.mode == 'number':
            if not is_integer(choice) or not 1 <= choice <= self.num_channels:
                raise ValueError(f'a width of mode "number" is an integer channel count '
                                 f'in [1, {self.num_channels}], got {describe(choice)}')
            return int(choice)
        if not 0 < choice <= 1:
            raise ValueError(f'a width of mode "ratio" is in (0, 1], got {choice!r}')
        return max(1, round(choice * self.num_channels))

    @property
    def current_channels(self) -> int:
        """The channels the current choice uses."""
        return self.channels(self.current_choice)

    def extra_repr(self) -> str:
        return f'num_channels={self.num_channels}, mode={self.mode!r}, ' + super().extra_repr()
