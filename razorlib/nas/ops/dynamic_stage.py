"""DynamicStage: a stage whose depth (how many of its blocks run) is a searchable value."""
from typing import Optional, Sequence

import torch
import torch.nn as nn

from ...registry import MODELS
from ..checks import integers
from ..mutables import OneShotMutableValue


@MODELS.register_module()
class DynamicStage(nn.Module):
    """Runs the first ``depth.current_choice`` of its blocks.

    A block past the smallest depth is searched only in subnets deep enough to run it;
    the search space object knows that (its choices do not count in other subnets).
    :meth:`to_static` keeps the blocks that run, as an ``nn.Sequential``.

    Args:
        blocks: the blocks of the deepest choice, in order; every block after the first
            must keep its input's shape.
        depths: the depth choices, integers in ``[1, len(blocks)]``; default every
            depth.

    Example:
        >>> stage = DynamicStage([nn.Identity(), nn.ReLU(), nn.Tanh()], depths=(1, 3))
        >>> stage.depth.current_choice = 1
        >>> len(stage.to_static())
        1
    """

    def __init__(self, blocks: Sequence[nn.Module], depths: Optional[Sequence[int]] = None):
        super().__init__()
        if not blocks:
            raise ValueError('DynamicStage needs at least one block')
        depths = tuple(range(1, len(blocks) + 1)) if depths is None else \
            integers(depths, 'DynamicStage', 'depths')
        bad = [d for d in depths if not 1 <= d <= len(blocks)]
        if bad:
            raise ValueError(f'DynamicStage depths must be in [1, {len(blocks)}] (its '
                             f'blocks), got {bad[0]}')
        self.depth = OneShotMutableValue(depths, integer=True)
        self.blocks = nn.ModuleList(blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks[:int(self.depth.current_choice)]:
            x = block(x)
        return x

    def to_static(self) -> nn.Sequential:
        """The blocks of the current depth."""
        return nn.Sequential(*self.blocks[:int(self.depth.current_choice)])
