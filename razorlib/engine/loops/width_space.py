"""WidthSpace: a pruner's subnets as kept channel counts per space, the unit of search.

A *widths* dict maps every space id to how many of its channels a subnet keeps.  It is
small, hashable through :meth:`WidthSpace.key`, JSON-friendly and turns into the
pruner's keep-masks by taking each space's channels in the pruner's own order
(``channel_orders()``: a prefix for ``RatioPruner``, largest L1 norm first for
``L1NormPruner``).

:class:`SearchSpace` is what the search loops need of a space; ``WidthSpace`` is one,
and a space of other decisions (an operation per layer) plugs into the same loops.
"""
import random
from typing import Any, Dict, List, Mapping, Protocol, Tuple

import torch

from ...pruning import StructurePruner

Widths = Dict[str, int]
#: A candidate of a search: one JSON-friendly choice per decision of the space.
Candidate = Dict[str, Any]


class SearchSpace(Protocol):
    """The interface of a search space, as the search loops use it.

    A candidate is a dict ``{decision id: choice}`` with JSON-friendly choices (a
    channel count in :class:`WidthSpace`), so records and the evolution's state are
    plain JSON.  Every random draw takes the caller's ``random.Random``, so a seeded
    search repeats and resumes exactly.

    Attributes:
        choices: per decision, the choices it may take, cheapest first (the
            evolution's feasibility check starts from every decision's first choice,
            unless the space has a ``cheapest(cost)`` method: a NAS space, whose ops'
            first choices need not cost least with widths nested in them).
    """
    choices: Dict[str, List[Any]]

    def key(self, candidate: Mapping[str, Any]) -> Tuple[Any, ...]:
        """The candidate as a hashable tuple in decision order."""

    def subnet(self, candidate: Mapping[str, Any]) -> Any:
        """What the model's ``set_subnet`` takes for the candidate."""

    def sample(self, rng: random.Random) -> Candidate:
        """A random candidate."""

    def mutate(self, candidate: Mapping[str, Any], prob: float,
               rng: random.Random) -> Candidate:
        """The candidate with each decision redrawn with probability ``prob``."""

    def crossover(self, first: Mapping[str, Any], second: Mapping[str, Any],
                  rng: random.Random) -> Candidate:
        """Each decision from ``first`` or ``second`` with equal chance."""


class WidthSpace:
    """The widths each space of a prepared pruner may take and the moves of a search
    (a :class:`SearchSpace` whose decisions are the pruner's spaces).

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
        """The pruner's subnet dict (keep-masks) for ``widths``; also :meth:`subnet`.
        Each keeps the first ``width`` channels of the order and, as the pruner's own
        masks do, a channel of every part of its group (``ChannelGroup.keep_best``)."""
        groups = self.pruner.groups.prunable
        return {gid: torch.from_numpy(groups[gid].keep_best(self._orders[gid].numpy(), width))
                for gid, width in self.check(widths).items()}

    subnet = masks

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
        """``widths`` with each space redrawn with probability ``prob``; ``widths`` is
        checked first (:meth:`check`), so a bad one fails naming its space before ``rng``
        is drawn from."""
        widths = self.check(widths, where='mutate')
        return {gid: rng.choice(choices) if rng.random() < prob else widths[gid]
                for gid, choices in self.choices.items()}

    def crossover(self, first: Mapping[str, int], second: Mapping[str, int],
                  rng: random.Random) -> Widths:
        """Each space's width from ``first`` or ``second`` with equal chance; both are
        checked first, as in :meth:`mutate`."""
        first = self.check(first, where='crossover: first')
        second = self.check(second, where='crossover: second')
        return {gid: (first if rng.random() < 0.5 else second)[gid] for gid in self.sizes}
