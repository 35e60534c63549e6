"""WidthSpace: a pruner's subnets as kept channel counts per space, the unit of search.

A *widths* dict maps every space id to how many of its channels a subnet keeps.  It is
small, hashable through :meth:`WidthSpace.key`, JSON-friendly and turns into the
pruner's keep-masks by taking each space's channels in the pruner's own order
(``channel_orders()``: a prefix for ``RatioPruner``, largest L1 norm first for
``L1NormPruner``).
"""
import random
from typing import Dict, Mapping, Tuple

import torch

from ...pruning import StructurePruner

Widths = Dict[str, int]


class WidthSpace:
    """The widths each space of a prepared pruner may take and the moves of a search.

    Args:
        pruner: a pruner after ``prepare_from_supernet``; a space's choices are the
            channel counts its ``ratios`` keep.

    Example:
        >>> import torch.nn as nn
        >>> from razorlib.pruning import RatioPruner
        >>> net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 4, 3))
        >>> pruner = RatioPruner(ratios=(0.5, 1.0))
        >>> pruner.prepare_from_supernet(net, torch.randn(1, 3, 8, 8))
        >>> space = WidthSpace(pruner)
        >>> space.choices
        {'0': [4, 8]}
        >>> space.masks({'0': 4})['0'].tolist()
        [True, True, True, True, False, False, False, False]
    """

    def __init__(self, pruner: StructurePruner):
        groups = pruner.channel_spaces
        self.pruner = pruner
        self.sizes = {gid: len(mask) for gid, mask in groups.items()}
        self._orders = {gid: torch.from_numpy(order.copy())
                        for gid, order in pruner.channel_orders().items()}
        prunable = pruner.groups.prunable
        self.choices = {
            gid: sorted({int(pruner.keep_ratio(prunable[gid], r, self._orders[gid].numpy()).sum())
                         for r in pruner.ratios})
            for gid in groups}

    def key(self, widths: Mapping[str, int]) -> Tuple[int, ...]:
        """The widths as a tuple in space order, for sets and dict keys."""
        return tuple(int(widths[gid]) for gid in self.sizes)

    def check(self, widths: Mapping[str, int], where: str = 'subnet') -> Widths:
        """``widths`` validated: every space named once with a count in [1, size].

        Raises:
            ValueError: naming the unknown or missing space, or the bad count.
        """
        unknown = [gid for gid in widths if gid not in self.sizes]
        if unknown:
            raise ValueError(f'{where}: unknown space id {unknown[0]!r}; the spaces are '
                             f'{list(self.sizes)[:5]}...')
        missing = [gid for gid in self.sizes if gid not in widths]
        if missing:
            raise ValueError(f'{where}: no width for space {missing[0]!r}')
        checked = {}
        for gid, size in self.sizes.items():
            value = widths[gid]
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= size:
                raise ValueError(f'{where}.{gid}: a width is a channel count in [1, {size}], '
                                 f'got {value!r}')
            checked[gid] = value
        return checked

    def masks(self, widths: Mapping[str, int]) -> Dict[str, torch.Tensor]:
        """The pruner's subnet dict (keep-masks) for ``widths``."""
        masks = {}
        for gid, width in self.check(widths).items():
            keep = torch.zeros(self.sizes[gid], dtype=torch.bool)
            keep[self._orders[gid][:width]] = True
            masks[gid] = keep
        return masks

    def widths(self, subnet: Mapping[str, torch.Tensor]) -> Widths:
        """Kept channels per space of a subnet dict (e.g. ``pruner.current_subnet``)."""
        return {gid: int(torch.as_tensor(subnet[gid]).count_nonzero()) for gid in self.sizes}

    def uniform(self, ratio: float) -> Widths:
        """Every space at ``ratio`` of its channels, rounded as the pruner rounds."""
        prunable = self.pruner.groups.prunable
        return {gid: int(self.pruner.keep_ratio(prunable[gid], ratio,
                                                self._orders[gid].numpy()).sum())
                for gid in self.sizes}

    def sample(self, rng: random.Random) -> Widths:
        """A random subnet: a uniform choice per space."""
        return {gid: rng.choice(choices) for gid, choices in self.choices.items()}

    def mutate(self, widths: Mapping[str, int], prob: float, rng: random.Random) -> Widths:
        """``widths`` with each space redrawn with probability ``prob``."""
        return {gid: rng.choice(choices) if rng.random() < prob else widths[gid]
                for gid, choices in self.choices.items()}

    def crossover(self, first: Mapping[str, int], second: Mapping[str, int],
                  rng: random.Random) -> Widths:
        """Each space's width from ``first`` or ``second`` with equal chance."""
        return {gid: (first if rng.random() < 0.5 else second)[gid] for gid in self.sizes}
