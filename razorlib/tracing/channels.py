"""What the tracer knows about one tensor: which of its dims carry channel slots."""
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, FrozenSet, Optional, Tuple

import numpy as np


@dataclass(frozen=True)
class TensorChannels:
    """Channel slots of one traced tensor.

    Args:
        shape: the tensor's shape.
        slots: ``{dim: slot ids}``, one id per index of that dim.  A dim that is not a key
            carries no prunable channels (batch, spatial, token dims, or channels that are
            fixed because they were frozen or come from outside the model).
        pending: dims made by a reshape that split one channel dim in two (the channel
            shuffle's ``view(b, g, c // g, h, w)``); only elementwise ops, permutes and a
            reshape that merges them back may touch them.

    Example:
        >>> import numpy as np
        >>> t = TensorChannels((1, 4, 8, 8), {1: np.arange(4)})
        >>> t.channel_dims
        (1,)
    """
    shape: Tuple[int, ...]
    slots: Dict[int, np.ndarray] = field(default_factory=dict)
    pending: FrozenSet[int] = frozenset()

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def channel_dims(self) -> Tuple[int, ...]:
        return tuple(sorted(self.slots))

    def all_slots(self) -> np.ndarray:
        """Every slot on every dim, concatenated."""
        if not self.slots:
            return np.zeros(0, dtype=np.int64)
        return np.concatenate([self.slots[d] for d in self.channel_dims])

    def pending_slots(self) -> np.ndarray:
        """Slots on the pending dims (those that must be merged back)."""
        parts = [self.slots[d] for d in sorted(self.pending) if d in self.slots]
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
