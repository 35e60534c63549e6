"""NasMutator: a model's mutables as one search space that samples, sets and exports.

A *choice dict* maps the module name of every mutable (``'backbone.stages.0.1'``) to
the choice it takes (an op name, a kernel size, a depth).  It is plain data: it goes
into a subnet YAML, a search state JSON and the search loops, which treat it as they
treat a pruner's widths (the ``SearchSpace`` interface of ``razorlib.engine.loops``,
as ``WidthSpace``).
"""
import random
from dataclasses import dataclass
from typing import Callable, Dict, FrozenSet, List, Mapping, Optional, Tuple

import torch.nn as nn

from ..utils.complexity import count_params
from .mutables import Choice, MutableChoice, OneShotMutableOP
from .ops import DynamicStage
from .subnet import FixedSubnet

Choices = Dict[str, Choice]


@dataclass(frozen=True)
class Condition:
    """A mutable matters only when the mutable ``key`` takes one of ``allowed``: it sits
    inside candidate op ``allowed`` of ``key``, or in a block that runs at those depths."""
    key: str
    allowed: FrozenSet[Choice]


def _children(module: nn.Module) -> List[Tuple[str, nn.Module]]:
    """Every (name, child) of ``module``, a child held under two names twice:
    ``named_children`` lists it once, which would hide a mutable used at two places."""
    return [(name, child) for name, child in module._modules.items() if child is not None]


class NasMutator:
    """Every mutable of a model, the moves of a search over them, and checks of a subnet.

    Mutables inside a candidate op or a deep-enough block are *conditional*: they
    count only when their op is chosen (or the depth runs their block).  A subnet
    need not name inactive ones, :meth:`key` ignores them (two subnets that differ only
    there are the same network), and exported subnets leave them out.

    Choices of an op are ordered by the candidate's parameter count (at the largest
    choices of the mutables inside it), values by size, so ``choices[key][0]`` is the
    first in that order, as a width space's narrowest.  It need not be the cheapest
    subnet: an op with more parameters at full width can cost less at the widths
    chosen inside it (a ``DynamicShuffleBlock``'s ``mid_ratios``); :meth:`cheapest`
    finds the cheapest by a cost it is given.

    Args:
        model: the supernet (architecture) holding the mutables.

    Raises:
        ValueError: a mutable module held at two places (``nn.Sequential(op, op)``),
            naming both: it computes one choice at both, while a subnet names each
            place, so one of two different choices would be dropped silently.

    Example:
        >>> from razorlib.nas import OneShotMutableOP, OneShotMutableValue
        >>> net = nn.Sequential(OneShotMutableOP(dict(
        ...     wide=nn.Conv2d(4, 4, 3), skip=nn.Identity())), OneShotMutableValue([1, 2]))
        >>> mutator = NasMutator(net)
        >>> mutator.choices
        {'0': ['skip', 'wide'], '1': [1, 2]}
        >>> mutator.sample(random.Random(0))
        {'0': 'wide', '1': 2}
        >>> mutator.check({'0': 'wid', '1': 1}, where='subnet.yaml')
        Traceback (most recent call last):
        ...
        ValueError: subnet.yaml: 0: 'wid' is not a choice of this OneShotMutableOP; its ...
    """

    def __init__(self, model: nn.Module):
        self.mutables: Dict[str, MutableChoice] = {}
        self.conditions: Dict[str, Tuple[Condition, ...]] = {}
        self._names: Dict[int, str] = {}
        self._collect(model, '', ())
        self.choices: Dict[str, List[Choice]] = {
            key: self._ordered(mutable) for key, mutable in self.mutables.items()}
        self.sizes = {key: len(choices) for key, choices in self.choices.items()}

    def _collect(self, module: nn.Module, prefix: str, conds: Tuple[Condition, ...]) -> None:
        if isinstance(module, MutableChoice):
            if id(module) in self._names:
                raise ValueError(
                    f'{prefix!r} is the mutable {self._names[id(module)]!r} again (one '
                    f'{type(module).__name__} at two places): it takes one choice, which a '
                    'subnet would name twice and could name differently; give each place '
                    'its own mutable')
            self._names[id(module)] = prefix
            self.mutables[prefix] = module
            self.conditions[prefix] = conds
        for name, child in _children(module):
            key = f'{prefix}.{name}' if prefix else name
            inner = conds
            if isinstance(module, OneShotMutableOP) and name == 'candidates':
                for op_name, candidate in _children(child):
                    self._collect(candidate, f'{key}.{op_name}',
                                  conds + (Condition(prefix, frozenset([op_name])), ))
                continue
            if isinstance(module, DynamicStage) and name == 'blocks':
                for index, block in _children(child):
                    deep = frozenset(d for d in module.depth.choices if d > int(index))
                    extra = () if deep == frozenset(module.depth.choices) else \
                        (Condition(f'{prefix}.depth' if prefix else 'depth', deep), )
                    self._collect(block, f'{key}.{index}', conds + extra)
                continue
            self._collect(child, key, inner)

    @staticmethod
    def _ordered(mutable: MutableChoice) -> List[Choice]:
        if isinstance(mutable, OneShotMutableOP):
            costs = {name: count_params(candidate)
                     for name, candidate in mutable.candidates.items()}
            return sorted(mutable.choices, key=lambda name: costs[name])
        return list(mutable.choices)

    # ------------------------------------------------------------------ state
    def current(self) -> Choices:
        """Every mutable's current choice."""
        return {key: mutable.current_choice for key, mutable in self.mutables.items()}

    def active(self, choices: Mapping[str, Choice]) -> Choices:
        """The part of ``choices`` that matters: mutables whose conditions hold.

        Raises:
            TypeError, ValueError: as :meth:`check`, for no mapping or unknown keys.
        """
        self._check_keys(choices, 'subnet')
        return self._active(choices)

    def _active(self, choices: Mapping[str, Choice]) -> Choices:
        """:meth:`active` of ``choices`` whose keys are checked already."""
        return {key: value for key, value in choices.items()
                if all(choices.get(c.key) in c.allowed for c in self.conditions[key])}

    def set(self, choices: Mapping[str, Choice], where: str = 'subnet') -> None:
        """Make every mutable take its choice; inactive ones left out keep theirs."""
        for key, value in self.check(choices, where).items():
            self.mutables[key].current_choice = value

    def check(self, choices: Mapping[str, Choice], where: str = 'subnet') -> Choices:
        """``choices`` validated and completed with the current choice of every inactive
        mutable it leaves out; each value is the mutable's own choice (``1`` given for a
        width ratio ``1.0`` comes back as ``1.0``).  An integer choice (kernel size,
        depth, channel count) given as a float (``5.0``) is refused.

        Raises:
            TypeError: ``choices`` is no mapping of mutable names to choices.
            ValueError: ``where: ...`` naming every unknown key, or every active mutable
                left out; ``where: KEY: ...`` for a choice the mutable does not have.
        """
        self._check_keys(choices, where)
        given = {}
        for key, value in choices.items():
            try:
                given[key] = self.mutables[key].check_choice(value)
            except ValueError as err:
                raise ValueError(f'{where}: {key}: {err}') from None
        completed = {key: given.get(key, mutable.current_choice)
                     for key, mutable in self.mutables.items()}
        # Not the mutables inside a missing op or block: the missing choice decides them.
        missing = [key for key in self._active(completed) if key not in given
                   and all(cond.key in given for cond in self.conditions[key])]
        if missing:
            options = ', '.join(f'{key!r} (one of {self.choices[key]})' for key in missing)
            raise ValueError(f'{where}: no choice for mutable{"s" * (len(missing) > 1)} '
                             f'{options}')
        return completed

    def _check_keys(self, choices: Mapping[str, Choice], where: str) -> None:
        """Refuse a non-mapping, and name every key that is no mutable of this model (a
        subnet of another model or config names several)."""
        if not isinstance(choices, Mapping):  # else a bare "'list' has no attribute 'items'"
            raise TypeError(f'{where}: a subnet is a dict of mutable name -> choice, got '
                            f'{type(choices).__name__}')
        unknown = [key for key in choices if key not in self.mutables]
        if unknown:
            known = list(self.mutables)
            raise ValueError(f'{where}: unknown mutable{"s" * (len(unknown) > 1)} '
                             f'{", ".join(map(repr, unknown))}; this model has '
                             f'{len(known)} mutables: {known[:4]}{"..." * (len(known) > 4)}')

    def subnet(self, choices: Mapping[str, Choice]) -> FixedSubnet:
        """What a supernet's ``set_subnet`` takes for ``choices`` (checked and
        completed): the search loops' name for it (``masks`` in older loops)."""
        return FixedSubnet(self.check(choices))

    masks = subnet

    def key(self, choices: Mapping[str, Choice]) -> Tuple[Optional[Choice], ...]:
        """A hashable form of the network ``choices`` builds (inactive mutables None)."""
        active = self.active(choices)
        return tuple(active.get(key) for key in self.mutables)

    # ------------------------------------------------------------------ search moves
    def sample(self, rng: random.Random) -> Choices:
        """A uniformly random subnet, drawn from ``rng`` only (never the global state)."""
        return {key: rng.choice(choices) for key, choices in self.choices.items()}

    def fair_samples(self, rng: random.Random) -> List[Choices]:
        """FairNAS's strict fairness: ``max(sizes)`` subnets in which every choice of
        every mutable appears (a mutable with fewer choices repeats random ones)."""
        count = max(self.sizes.values(), default=1)
        columns = {}
        for key, choices in self.choices.items():
            column = list(choices) + [rng.choice(choices) for _ in range(count - len(choices))]
            rng.shuffle(column)
            columns[key] = column
        return [{key: column[i] for key, column in columns.items()} for i in range(count)]

    def mutate(self, choices: Mapping[str, Choice], prob: float, rng: random.Random) -> Choices:
        """``choices`` with each mutable redrawn with probability ``prob``.

        ``choices`` is checked and completed first, as :meth:`check` does (an exported
        subnet leaves inactive mutables out; they keep their current choice), so a bad
        subnet fails naming its keys, before ``rng`` is drawn from.
        """
        choices = self.check(choices, where='mutate')
        return {key: rng.choice(options) if rng.random() < prob else choices[key]
                for key, options in self.choices.items()}

    def crossover(self, first: Mapping[str, Choice], second: Mapping[str, Choice],
                  rng: random.Random) -> Choices:
        """Each mutable's choice from ``first`` or ``second`` with equal chance; both are
        checked and completed first, as in :meth:`mutate`."""
        first = self.check(first, where='crossover: first')
        second = self.check(second, where='crossover: second')
        return {key: (first if rng.random() < 0.5 else second)[key] for key in self.mutables}

    def min_subnet(self) -> Choices:
        """Every mutable at its first choice in :attr:`choices`' order (fewest op
        parameters at full inner width, smallest value): the cheapest for independent
        mutables, but not always with mutables nested in ops (:meth:`cheapest` is)."""
        return {key: choices[0] for key, choices in self.choices.items()}

    def cheapest(self, cost: Callable[[Choices], float]) -> Choices:
        """The subnet of least ``cost`` (e.g. its FLOPs or params, counted as the search
        counts them), found with one ``cost`` per choice of each op.

        A layer's cost depends on its own choices only (every candidate of an op maps
        the same input to outputs of the same shape), and a value costs the less the
        smaller it is (a kernel, a ratio, a width, a depth).  So every value takes its
        smallest choice, and each op the candidate of least cost with the mutables
        inside it at their cheapest: the ops nested deepest are chosen first, each
        measured with the ops and depths around it set to run it.  An op that no
        subnet runs (in a block past a stage's largest depth) keeps its first choice.
        """
        best = self.min_subnet()
        ops = [key for key, mutable in self.mutables.items()
               if isinstance(mutable, OneShotMutableOP) and self.reachable(key)]
        for key in sorted(ops, key=lambda op: -len(self.conditions[op])):
            running = dict(best, **self.running(key))
            best[key] = min(self.choices[key], key=lambda choice: cost({**running, key: choice}))
        return best

    def reachable(self, key: str) -> bool:
        """Whether some subnet makes mutable ``key`` count.  A block of a stage past the
        largest of its depth choices (``DynamicStage(3 blocks, depths=(1, 2))``) never
        runs: no choice meets its condition, so there is no subnet to measure it in."""
        return all(cond.allowed & set(self.choices[cond.key]) for cond in self.conditions[key])

    def running(self, key: str) -> Choices:
        """Choices that make mutable ``key`` count: each op it sits in at the candidate
        holding it, each stage it sits in at its smallest depth that runs its block."""
        return {cond.key: next(choice for choice in self.choices[cond.key]
                               if choice in cond.allowed)
                for cond in self.conditions[key]}

    def max_subnet(self) -> Choices:
        """Every mutable at its last choice in :attr:`choices`' order (the most op
        parameters at full inner width, the largest value)."""
        return {key: choices[-1] for key, choices in self.choices.items()}
