"""What the tracer knows about one tensor: which of its dims carry channel slots."""
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, FrozenSet, Optional, Tuple

import numpy as np


@dataclass(frozen=True)
class Split:
    """Channels of one dim that a reshape split over several dims, not yet read.

    ``q_proj(x).view(B, N, heads, head_dim)`` splits 64 channels into a 4 x 16 grid.
    What the split means is only known from what reads it: merged back after a permute
    it is a channel shuffle; read by a matrix product or attention it is heads (each
    row a head, its ``head_dim`` channels kept or pruned together).

    Args:
        dims: the tensor dim of each grid axis.
        grid: the slot ids, one grid axis per split dim, in the order the reshape made
            them (so ``grid.ravel()`` is the channel order before the split).
        fixed: the grid axes whose sizes the code gave as numbers of its own, where it
            sized the others from the widths (``-1``, or ``c // g`` of a ``c`` it read):
            those stay in the slim model, the others shrink.  None where that is not
            known (every axis, or none, given so).  A channel shuffle's ``view(b, g,
            c // g, h, w)`` fixes axis 0, its inverse's ``view(b, c // g, g, h, w)`` axis 1.

    Example:
        >>> import numpy as np
        >>> Split((2, 3), np.arange(8).reshape(2, 4)).moved({2: 1, 3: 3}).dims
        (1, 3)
    """
    dims: Tuple[int, ...]
    grid: np.ndarray
    fixed: Optional[Tuple[int, ...]] = None

    def moved(self, position: Dict[int, int]) -> 'Split':
        """The same split with its dims renumbered (``position[old] = new``)."""
        return Split(tuple(position[d] for d in self.dims), self.grid, self.fixed)


@dataclass(frozen=True)
class TensorChannels:
    """Channel slots of one traced tensor.

    Args:
        shape: the tensor's shape.
        slots: ``{dim: slot ids}``, one id per index of that dim.  A dim that is not a key
            carries no prunable channels (batch, spatial, token dims, or channels that are
            fixed because they were frozen or come from outside the model).
        split: channels a reshape split over several dims (:class:`Split`); only ops
            that keep it (elementwise ops, permutes, reshapes, selects of a grid axis)
            carry it, any other op reads it as heads first (``tracing/heads.py``).
        repeats: ``{dim: head slots}`` for dims along which the tensor repeats one
            slice, an ``expand`` of a size-1 dim: multi-query attention's ``repeat_kv``
            of its one key/value head over the query heads.  Each entry is the slot that
            stands for the repeated head (the first of the tensor's one channel dim,
            bound to the rest only if attention reads it as a head:
            ``heads.pair_single_head``).  Only expands, permutes, reshapes and
            same-shape copies keep them; no other rule reads them, so losing one only
            leaves heads unpaired.

    Example:
        >>> import numpy as np
        >>> t = TensorChannels((1, 4, 8, 8), {1: np.arange(4)})
        >>> t.channel_dims
        (1,)
    """
    shape: Tuple[int, ...]
    slots: Dict[int, np.ndarray] = field(default_factory=dict)
    split: Optional[Split] = None
    repeats: Dict[int, np.ndarray] = field(default_factory=dict)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def channel_dims(self) -> Tuple[int, ...]:
        return tuple(sorted(self.slots))

    @property
    def pending(self) -> FrozenSet[int]:
        """The dims of the split, if any."""
        return frozenset(self.split.dims) if self.split is not None else frozenset()

    def all_slots(self) -> np.ndarray:
        """Every slot on every dim (and in the split), concatenated."""
        parts = [self.slots[d] for d in self.channel_dims]
        if self.split is not None:
            parts.append(self.split.grid.ravel())
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


class InputInfo:
    """One input of a grad_fn node as the rules see it.

    ``channels`` is None for an untracked input (a model input or a constant: autograd
    does not record it, so even its shape is unknown).  For a parameter or buffer leaf,
    ``param`` names it and ``channels`` is created on first use (``resolve``), so the
    weights that layer rules read directly never get slots.
    """
    __slots__ = ('node', 'output_nr', 'shape', '_channels', 'param', 'tensor', 'resolve')

    def __init__(self, node: Any, output_nr: int, shape: Optional[Tuple[int, ...]],
                 channels: Optional[TensorChannels], param: Optional[str] = None,
                 tensor: Any = None, resolve: Optional[Callable[[], TensorChannels]] = None):
        self.node = node
        self.output_nr = output_nr
        self.shape = shape
        self._channels = channels
        self.param = param
        self.tensor = tensor
        self.resolve = resolve

    @property
    def channels(self) -> Optional[TensorChannels]:
        if self._channels is None and self.resolve is not None:
            self._channels = self.resolve()
        return self._channels
