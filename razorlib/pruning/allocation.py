"""Allocation: how many channels each group keeps to meet a budget.

A budget is a ratio of channels, or a fraction of the dense model's FLOPs, params or
measured latency.

- **local** (``global_ranking=False``): every group keeps the same ratio of its
  channels, its best ones by its own scores; for a FLOPs or params budget the common
  ratio is the largest that meets it.
- **global**: all groups' channels are ranked together by their (normalised) scores and
  the best ``K`` are kept, ``K`` the largest that meets the budget.
- **sensitivity**: each group keeps its best channels down to the width whose measured
  loss increase, the group cut alone, stays under a common threshold; the threshold is
  the smallest that meets the budget (:mod:`razorlib.pruning.sensitivity`); greedy, the
  widths of the first subnet on a greedy path of measured cuts that meets it.

Each group's kept count then obeys :class:`WidthRule`: at least one channel, a multiple
of ``round_to`` (or the full width), no more than ``max_ratio`` of it pruned, and a
channel in every piece the group's chunks and merged layers need (``keep_best``).

FLOPs and params of a candidate are exact: its masks are set and the masked model is
counted by :func:`~razorlib.utils.get_model_complexity`, which counts it as the sliced
model; a bisection over the candidates finds the budget's.  Latency is measured on a
runtime: a per-layer table predicts it and measured candidates confirm it
(:mod:`razorlib.pruning.latency`).  A budget the rules cannot meet raises before any
mask changes, naming the smallest reachable value.
"""
import math
import numbers
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ..tracing import ChannelGroup
from ..utils.checks import real_number, switch
from ..utils.complexity import Complexity, count_params, get_model_complexity, human
from .latency import LatencyChoice, SubnetLatency
from .runtimes import RuntimeArg
from .sensitivity import GreedyPath, Sensitivity, grid, threshold_counts, widest_within

__all__ = ['Allocation', 'SubnetMeter', 'WidthRule', 'allocate', 'budget_of',
           'refuse_unreachable']

Keep = Dict[str, np.ndarray]


class SubnetMeter:
    """Exact FLOPs and params of a prepared pruner's subnets.

    Sets the subnet's masks, counts the masked model and puts the masks back as they
    were, so measuring changes nothing.

    Args:
        pruner: a prepared :class:`~razorlib.pruning.StructurePruner`.
        example_inputs: the inputs FLOPs are counted on.
    """

    def __init__(self, pruner: Any, example_inputs: Any):
        self.pruner, self.example_inputs = pruner, example_inputs

    def __call__(self, keep: Keep, flops: bool = True) -> Complexity:
        """The complexity of ``keep`` (FLOPs 0 when ``flops=False``: params need no
        forward)."""
        pruner = self.pruner
        previous = pruner.current_subnet
        pruner.set_subnet(keep)
        try:
            if not flops:
                return Complexity(0, count_params(pruner.model, pruner.kinds))
            return get_model_complexity(pruner.model, self.example_inputs,
                                        layer_kinds=pruner.kinds)
        finally:
            pruner.set_subnet(previous)


@dataclass
class WidthRule:
    """Which kept channel counts a group may have.

    Args:
        round_to: the leader layer's kept width is a multiple of it, or its full width;
            where the leader's width is no whole multiple of the group's channels (a
            concat read back in chunks), the number of group channels kept is.
        max_ratio: the largest fraction of a group's channels that may be pruned (0.75:
            every group keeps at least a quarter); None: down to one channel.
    """
    round_to: int = 1
    max_ratio: Optional[float] = None

    def __post_init__(self) -> None:
        round_to = real_number(self.round_to, 'round_to', 'a positive integer')
        if not round_to.is_integer() or round_to < 1:
            raise ValueError(f'round_to must be a positive integer, got {self.round_to!r}')
        self.round_to = int(round_to)
        if self.max_ratio is not None and not 0 <= real_number(
                self.max_ratio, 'max_ratio', 'the largest fraction of a group that may be '
                'pruned') < 1:
            raise ValueError(f'max_ratio is the largest fraction of a group that may be '
                             f'pruned, in [0, 1), got {self.max_ratio!r}')

    def allowed(self, group: ChannelGroup) -> np.ndarray:
        """The kept counts allowed, ascending; the full width always is.  A group of
        several parts (merged layers, chunks) keeps at least one channel per part, so no
        count below the number of parts is offered: ``keep_best`` would keep more than
        it, whatever ``round_to`` says.

        Example:
            >>> group = ChannelGroup('conv', 10, 10)
            >>> WidthRule(round_to=4, max_ratio=0.5).allowed(group).tolist()
            [8, 10]
            >>> parts = [(str(i), np.arange(2 * i, 2 * i + 2)) for i in range(3)]
            >>> WidthRule(round_to=2).allowed(ChannelGroup('cat', 6, 6, parts=parts)).tolist()
            [4, 6]

            A fused projection of 4 query heads of 16 and a key and a value head kept
            whole (96 outputs): 1 query head makes 48, all 4 make 96.

            >>> fused = ChannelGroup('c_attn', 4, 96, kept=np.array([4, 5]),
            ...                      positions=np.repeat(np.arange(6), 16))
            >>> WidthRule(round_to=48).allowed(fused).tolist()
            [1, 4]
        """
        counts, rounded = self._rounded(group)
        ok = rounded & (counts >= self._fewest(group))
        ok[-1] = True
        return counts[ok]

    def _rounded(self, group: ChannelGroup) -> Tuple[np.ndarray, np.ndarray]:
        """The counts ``1..channels`` and, for each, whether ``round_to`` allows it."""
        n = group.num_channels
        counts = np.arange(1, n + 1)
        # the leader's outputs a group keeps whole (gqa='query''s key/value heads of a
        # fused projection) count in its kept width, not per channel
        whole = int(np.isin(group.positions, group.kept).sum()) if group.kept.size else 0
        pruned = group.width - whole
        widths = counts * (pruned // n) + whole if pruned % n == 0 else counts  # else bound
        return counts, widths % self.round_to == 0

    def _fewest(self, group: ChannelGroup) -> int:
        """The fewest channels the lower bounds leave: one per part, ``max_ratio``'s."""
        fewest = max(1, len(group.parts))
        if self.max_ratio is not None:
            fewest = max(fewest, math.ceil((1 - self.max_ratio) * group.num_channels - 1e-9))
        return fewest

    def max_ratio_floors(self, group: ChannelGroup) -> bool:
        """Whether ``max_ratio`` raises the group's fewest channels above one per part.

        Example:
            >>> group = ChannelGroup('conv', 8, 8)
            >>> [WidthRule(max_ratio=m).max_ratio_floors(group) for m in (0.5, None)]
            [True, False]
        """
        return self._fewest(group) > max(1, len(group.parts))

    def least_rounded(self, group: ChannelGroup) -> float:
        """The least ``count`` that :meth:`fit` rounds to the group's smallest allowed
        count as it rounds any count: to the nearest width ``round_to`` allows.  Below
        it, the nearest would be narrower (no channel at all, or fewer than a part per
        layer or ``max_ratio`` allow), and the smallest allowed count is a floor, not a
        rounding.

        Example:
            >>> group = ChannelGroup('conv', 8, 8)
            >>> WidthRule().least_rounded(group), WidthRule(max_ratio=0.5).least_rounded(group)
            (0.5, 3.5)
            >>> WidthRule(round_to=4).least_rounded(group)  # the widths 0, 4, 8: 2 is a tie
            2.0
        """
        counts, rounded = self._rounded(group)
        smallest = int(self.allowed(group)[0])
        below = counts[rounded & (counts < smallest)]
        return (smallest + (int(below[-1]) if below.size else 0)) / 2

    def fit(self, group: ChannelGroup, count: float, allowed: Optional[np.ndarray] = None) -> int:
        """The allowed count nearest ``count`` (the larger on a tie).

        Example:
            >>> WidthRule(round_to=8).fit(ChannelGroup('conv', 64, 64), 21.0)
            24
            >>> WidthRule().fit(ChannelGroup('conv', 45, 45), 0.7 * 45)  # 31.5: a tie
            32
        """
        allowed = self.allowed(group) if allowed is None else allowed
        count = round(count, 9)  # 0.7 * 45 is 31.499999999999996 in float: a tie, 32
        i = int(np.searchsorted(allowed, count))
        if i == len(allowed):
            return int(allowed[-1])
        if i > 0 and count - allowed[i - 1] < allowed[i] - count:
            return int(allowed[i - 1])
        return int(allowed[i])


@dataclass
class Allocation:
    """The subnet an allocation chose and what it costs.

    Args:
        subnet: keep-mask per group id (:meth:`StructurePruner.set_subnet` takes it).
        kept: group id -> ``(kept channels, channels)``.
        dense: the model's complexity at full width (None when not measured: a ratio
            budget needs no counting).
        pruned: the subnet's complexity.
        ratio: the common ratio of a local allocation.
        unscored: groups the criterion could not score, kept whole.
        latency: for a latency budget, the search's measurements (dense milliseconds,
            the subnet's measured fraction, every candidate measured).
    """
    subnet: Keep
    kept: Dict[str, Tuple[int, int]]
    dense: Optional[Complexity] = None
    pruned: Optional[Complexity] = None
    ratio: Optional[float] = None
    unscored: List[str] = field(default_factory=list)
    latency: Optional[LatencyChoice] = None

    def fraction(self, metric: str) -> Optional[float]:
        """The subnet's ``'flops'``, ``'params'`` or measured ``'latency'`` over the
        dense model's."""
        if metric == 'latency':
            return None if self.latency is None else self.latency.fraction
        if self.dense is None or self.pruned is None:
            return None
        return getattr(self.pruned, metric) / max(getattr(self.dense, metric), 1)

    def __str__(self) -> str:
        lines = []
        if self.dense is not None:
            lines.append(f'FLOPs {human(self.dense.flops)} -> {human(self.pruned.flops)} '
                         f'({self.fraction("flops"):.3f}), params {human(self.dense.params)} '
                         f'-> {human(self.pruned.params)} ({self.fraction("params"):.3f})')
        if self.latency is not None:
            lines.append(f'latency {self.latency.dense_ms:.3f} ms -> {self.latency.ms:.3f} ms '
                         f'({self.latency.fraction:.3f}, measured)')
        lines += [f'  {gid}: {kept}/{total}' for gid, (kept, total) in self.kept.items()]
        if self.unscored:
            lines.append(f'  not scored, kept whole: {", ".join(self.unscored)}')
        return '\n'.join(lines)


def budget_of(ratio: Optional[float] = None, flops: Optional[float] = None,
              params: Optional[float] = None,
              latency: Optional[float] = None) -> Tuple[str, float]:
    """``(metric, value)`` of the one budget given (``ratio`` 0.5 if none is).

    Example:
        >>> budget_of(flops=0.5)
        ('flops', 0.5)
    """
    given = [(k, v) for k, v in (('ratio', ratio), ('flops', flops), ('params', params),
                                 ('latency', latency)) if v is not None]
    if len(given) > 1:
        raise ValueError(f'give one budget, got {", ".join(f"{k}={v}" for k, v in given)}')
    metric, value = given[0] if given else ('ratio', 0.5)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f'{metric} is a fraction of the dense model, a number in (0, 1]; got '
                        f'{value!r}' + (' (a pruner config takes ratios=(...) to sample from)'
                                        if metric == 'ratio' and isinstance(value, (tuple, list))
                                        else ''))
    if not 0 < float(value) <= 1:
        raise ValueError(f'{metric} is a fraction of the dense model in (0, 1], got {value!r}')
    return metric, float(value)


class _Family:
    """Candidate subnets indexed 0..size, each keeping at least as much as the one
    before: 0 is the smallest the rules allow, ``size`` the full model."""

    def __init__(self, groups: List[ChannelGroup], scores: Dict[str, np.ndarray],
                 rule: WidthRule, global_ranking: bool,
                 sensitivity: Optional[Sensitivity] = None, path: Optional[GreedyPath] = None):
        self.groups, self.rule, self.global_ranking = groups, rule, global_ranking
        self.sensitivity, self.path = sensitivity, path
        self.allowed = {g.id: rule.allowed(g) for g in groups}
        self.orders = {g.id: np.argsort(-scores[g.id], kind='stable') for g in groups}
        if path is not None:  # index 0 the path's last (smallest) subnet
            whole = {g.id: g.num_channels for g in groups}
            self.path = [{**whole, **counts} for counts in reversed(path)]
            self.size = len(path) - 1
        elif sensitivity is not None:
            self.curves = {g.id: threshold_counts(
                {count: loss for count, loss in sensitivity.get(g.id, {}).items()
                 if count in set(self.allowed[g.id].tolist())}, g.num_channels)
                for g in groups}
            levels = {level for curve in self.curves.values() for level in curve.values()}
            # descending: index 0 the largest threshold (the smallest subnet), the last
            # -inf (every group whole)
            self.thresholds = sorted(levels - {-np.inf}, reverse=True) + [-np.inf]
            self.size = len(self.thresholds) - 1
        elif global_ranking:
            flat = np.concatenate([scores[g.id] for g in groups] or [np.zeros(0)])
            owner = np.repeat(np.arange(len(groups)), [g.num_channels for g in groups])
            # ties go to the channel higher in its own group's order (relative to the
            # group's size), so equal scores prune every group alike, not the last ones
            within = np.concatenate([np.argsort(self.orders[g.id]) / g.num_channels
                                     for g in groups] or [np.zeros(0)])
            rank = np.empty(len(flat), dtype=np.int64)
            rank[np.lexsort((within, -flat))] = np.arange(len(flat))
            # each group's channels' global ranks, ascending: the best K hold
            # searchsorted(ranks, K) of them
            self.ranks = {g.id: np.sort(rank[owner == i]) for i, g in enumerate(groups)}
            self.size = len(flat)
        else:
            self.ratios = _common_ratios(groups, self.allowed)
            self.size = len(self.ratios) - 1

    def counts_at_ratio(self, ratio: float) -> Dict[str, int]:
        return {g.id: self.rule.fit(g, ratio * g.num_channels, self.allowed[g.id])
                for g in self.groups}

    def counts_at_top(self, top: int) -> Dict[str, int]:
        return {g.id: self.rule.fit(g, int(np.searchsorted(self.ranks[g.id], top)),
                                    self.allowed[g.id]) for g in self.groups}

    def counts_at_threshold(self, threshold: float) -> Dict[str, int]:
        return {gid: min(count for count, level in curve.items() if level <= threshold)
                for gid, curve in self.curves.items()}

    def counts(self, index: int) -> Dict[str, int]:
        if self.path is not None:
            return self.path[index]
        if self.sensitivity is not None:
            return self.counts_at_threshold(self.thresholds[index])
        if self.global_ranking:
            return self.counts_at_top(index)
        return self.counts_at_ratio(self.ratios[index])

    def ratio(self, index: int) -> Optional[float]:
        """The common ratio of candidate ``index`` (None unless the allocation is local)."""
        if not self.local:
            return None
        return self.ratios[index]

    @property
    def local(self) -> bool:
        """Whether every group keeps one common ratio."""
        return self.path is None and self.sensitivity is None and not self.global_ranking

    def keep(self, counts: Dict[str, int]) -> Keep:
        return {g.id: g.keep_best(self.orders[g.id], counts[g.id]) for g in self.groups}


def _common_ratios(groups: Sequence[ChannelGroup], allowed: Dict[str, np.ndarray]) -> List[float]:
    """0, 1 and every common ratio at which a group's kept count changes, ascending.

    :meth:`WidthRule.fit` rounds ``ratio * channels`` to the nearest allowed count, the
    larger on a tie, so a group whose allowed counts go ``a, b`` keeps ``b`` from the
    ratio ``(a + b) / 2 / channels`` on.  No group changes between two of these ratios, so
    they reach every subnet a common ratio reaches (each at the least ratio that keeps
    it), one candidate per allowed count of each group.  A ratio between two breakpoints
    of ``round(ratio * channels)`` would miss, with ``round_to=2``, the ratios where a
    group changes at an odd count's breakpoint and another at an even count's.

    Example:
        >>> groups = [ChannelGroup('a', 4, 4), ChannelGroup('b', 9, 9)]
        >>> rule = WidthRule(round_to=2)
        >>> [round(r, 4) for r in _common_ratios(groups, {g.id: rule.allowed(g) for g in groups})]
        [0.0, 0.3333, 0.5556, 0.75, 0.7778, 0.9444, 1.0]
    """
    ratios = {0.0, 1.0}
    for group in groups:
        counts = allowed[group.id]
        ratios.update(((counts[:-1] + counts[1:]) / 2 / group.num_channels).tolist())
    return sorted(ratios)


def within(target: float, dense: float) -> float:
    """The most a subnet may cost for a budget of ``target`` times ``dense``: the product
    with a relative slack of 1e-12, so that a cost exactly at the fraction asked passes
    (``0.58 * 50`` is 28.999999999999996 in float, and a subnet of 29 of 50 parameters
    meets ``params=0.58``).

    Example:
        >>> 0.58 * 50 < 29 <= within(0.58, 50)
        True
    """
    return target * dense * (1 + 1e-12)


def _largest_within(cost: Callable[[int], float], size: int, limit: float) -> int:
    """The largest index in ``[0, size]`` whose cost is at most ``limit``, given
    ``cost(0) <= limit`` and a cost that does not fall as the index grows."""
    lo, hi = 0, size
    if cost(hi) <= limit:
        return hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if cost(mid) <= limit else (lo, mid)
    return lo


def _filled(family: _Family, index: int, cost: Callable[[Dict[str, int]], float],
            limit: float) -> Dict[str, int]:
    """Candidate ``index``'s counts, with what they leave of ``limit`` spent where the
    allocation can: for a sensitivity allocation, each group that widens at the next
    candidate (over ``limit``) widened, one after another, to the widest width the
    rules allow that keeps ``cost`` within ``limit``; for the global ranking, the
    channels ranked after the candidate's that fit (:func:`_filled_by_rank`).

    Sensitivity candidates move in steps of the groups' measured grids (10% of a group
    at ``steps=10``), so the last one within a budget can leave part of it unused (0.467
    of the FLOPs for ``flops=0.5`` in benchmarks/README.md's prune-quality run 8); the
    group next in line, the least sensitive of the rest, takes what is left at a width
    between its grid points.  The local allocation keeps one ratio for every group, and
    a greedy path trims its last cut itself.
    """
    counts = family.counts(index)
    if index >= family.size:
        return counts
    if family.global_ranking:
        return counts if cost(counts) >= limit * (1 - FILL_SLACK) else \
            _filled_by_rank(family, counts, cost, limit)
    if family.sensitivity is None:
        return counts
    for gid, wider in family.counts(index + 1).items():
        if wider > counts[gid]:
            counts, _ = widest_within(counts, cost(counts), gid, wider, family.allowed[gid],
                                      cost, limit)
    return counts


#: The share of a budget the global ranking's best channels may leave unspent before
#: :func:`_filled_by_rank` looks for channels after them to spend it on: trying each
#: group costs a count of the subnet (a forward for FLOPs), and a large model's
#: channels are too fine for such a remainder to buy more than a few of them.
FILL_SLACK = 1e-3


def _filled_by_rank(family: _Family, counts: Dict[str, int],
                    cost: Callable[[Dict[str, int]], float], limit: float) -> Dict[str, int]:
    """``counts`` (the most channels from the top of the global ranking that fit) with
    the budget's remainder given to the channels ranked after them, best first, each
    group widened by one allowed step while the cost stays within ``limit``.

    The top of the ranking stops at the first channel that does not fit, and one
    channel of a wide residual stream can cost as much as many of a thin layer: with
    ``max_ratio=0.8`` the top of the ranking of a digits ResNet-18 kept 0.093 of its
    FLOPs for ``flops=0.1`` (benchmarks/README.md, prune quality, after run 14).
    A group that cannot widen now cannot later, as the others only spend more.  Each
    group tried costs one count of the subnet, and each width added one more: on an
    8-layer Llama 74 FLOPs counts in all where the top of the ranking took 16, so the
    remainder is only looked into where it is at least :data:`FILL_SLACK` of the budget.

    Example:
        >>> group = ChannelGroup('a', 4, 4)
        >>> family = _Family([group, ChannelGroup('b', 4, 4)],
        ...                  {'a': np.array([9., 8, 1, 0]), 'b': np.array([7., 6, 5, 4])},
        ...                  WidthRule(), global_ranking=True)
        >>> family.counts(3)  # the best three: a's two, then b's best
        {'a': 2, 'b': 1}
        >>> cost = lambda counts: 5 * counts['a'] + counts['b']  # a's channels cost 5
        >>> _filled_by_rank(family, family.counts(3), cost, limit=14)  # b's next fit, a's not
        {'a': 2, 'b': 4}
    """
    counts, open_groups = dict(counts), {g.id for g in family.groups}
    while True:
        # the global rank of each open group's best channel not kept (none: it is whole)
        after = {gid: family.ranks[gid][counts[gid]] for gid in open_groups
                 if counts[gid] < len(family.ranks[gid])}
        if not after:
            return counts
        gid = min(after, key=after.get)
        allowed = family.allowed[gid]
        wider = {**counts, gid: int(allowed[np.searchsorted(allowed, counts[gid], 'right')])}
        if cost(wider) <= limit:
            counts = wider
        else:
            open_groups.discard(gid)


def _unscored_note(unscored: Sequence[str]) -> str:
    """What a refusal adds about the groups the criterion does not score: they stay
    whole, so a budget may be out of reach for them and not for the rules."""
    if not unscored:
        return ''
    more = f' and {len(unscored) - 3} more' if len(unscored) > 3 else ''
    return (f' {len(unscored)} prunable group(s) the criterion does not score stay whole '
            f'({", ".join(unscored[:3])}{more}).')


def _describe_rules(rule: WidthRule, measured: Optional[str] = None) -> str:
    """What sets the smallest subnet: the width rules, and for a measured allocation
    (``measured``: ``'greedy'`` or ``'sensitivity'``, :func:`_measured`) the narrowest
    widths it measures (a sensitivity grid's first points, a greedy path's end), which
    may lie above what the rules allow."""
    parts = ['every group keeps a channel of each layer and chunk piece']
    if rule.max_ratio is not None:
        parts.append(f'max_ratio={rule.max_ratio}')
    if rule.round_to > 1:
        parts.append(f'round_to={rule.round_to}')
    if measured == 'greedy':
        parts.append("no narrower than the greedy path's last step (more sensitivity steps, "
                     'or the local allocation, reach lower)')
    elif measured == 'sensitivity':
        parts.append('no narrower than the narrowest widths the sensitivity grid measured, '
                     "1/steps of each group (more steps, or the local allocation, reach "
                     'lower)')
    return ', '.join(parts)


def _measured(family: '_Family') -> Optional[str]:
    """How ``family``'s candidates were measured, for :func:`_describe_rules`."""
    return 'greedy' if family.path is not None else \
        'sensitivity' if family.sensitivity is not None else None


def _check_common_ratio(family: _Family, target: float, unscored: Sequence[str]) -> None:
    """Refuse a common ratio below what ``max_ratio`` lets a group round to.

    Each group keeps the allowed count nearest ``target`` times its channels (half of 5
    channels keeps 3).  Where ``max_ratio`` sets a group's smallest allowed count and the
    ratio rounds below it, that count is a floor the user's bound imposes, far from the
    ratio asked: ``ratio=0.05, max_ratio=0.5`` would keep half of every group.  Such a
    budget is refused, as the global ranking refuses a ratio of all channels its
    smallest subnet exceeds.  The floors every subnet has (one channel, one per part, a
    multiple of ``round_to``) stay floors, as they were: a small group keeps its one
    channel (or one KV head) under ``ratio=0.2``.  A group the rules keep whole is left
    out: ``razorlib.prune`` warns when nothing can be pruned.
    """
    rule = family.rule
    least = {g.id: rule.least_rounded(g) for g in family.groups
             if len(family.allowed[g.id]) > 1 and rule.max_ratio_floors(g)}
    short = [g for g in family.groups
             if g.id in least and round(target * g.num_channels, 9) < least[g.id]]
    if not short:
        return
    group = max(short, key=lambda g: least[g.id] / g.num_channels)
    reachable = math.ceil(round(least[group.id] / group.num_channels * 1e4, 6)) / 1e4
    raise ValueError(
        f'ratio={target:g} cannot be met: the smallest subnet allowed '
        f'({_describe_rules(rule)}) keeps {family.allowed[group.id][0]} of the '
        f'{group.num_channels} channels of group {group.id!r}, more than the ratio rounds '
        f'to; ask for ratio>={reachable:.4f}, or lower round_to / raise max_ratio.'
        + _unscored_note(unscored) + ' Nothing was changed.')


def _cost_refusal(metric: str, target: float, rules: str, least: float, dense: float,
                  unscored: Sequence[str] = (), bound: bool = False) -> ValueError:
    """The refusal of a FLOPs or params budget whose smallest subnet costs ``least`` of
    ``dense``; ``bound``: ``least`` is a lower bound (:func:`refuse_unreachable`)."""
    best = least / max(dense, 1)
    at_least, why, more = ('at least ', ', as the scores choose which channels keep a '
                           "group's layers and chunk pieces", ' or more') if bound else ('', '', '')
    return ValueError(
        f'{metric}={target:g} cannot be met: the smallest subnet allowed ({rules}) keeps '
        f"{at_least}{best:.4f} of the dense model's {metric} ({at_least}{human(least)} of "
        f'{human(dense)}{why}); ask for {metric}>={math.ceil(best * 1e4) / 1e4:.4f}{more}, '
        'or lower round_to / raise max_ratio.' + _unscored_note(unscored) +
        ' Nothing was changed.')


def _latency_refusal(target: float, rule: WidthRule, measured: Optional[str] = None
                     ) -> ValueError:
    """The refusal of a latency budget below 1 where the rules leave nothing to prune."""
    return ValueError(
        f'latency={target:g} cannot be met: nothing can be pruned under the given rules '
        f'({_describe_rules(rule, measured)}): the smallest subnet allowed is the dense '
        'model; lower round_to / raise max_ratio. Nothing was changed.')


def refuse_unreachable(pruner: Any, rule: WidthRule, *, flops: Optional[float] = None,
                       params: Optional[float] = None, latency: Optional[float] = None,
                       example_inputs: Any = None, steps: Optional[int] = None,
                       greedy: bool = False) -> Optional[Complexity]:
    """Refuse a budget the width rules cannot meet whatever the scores, before any are
    computed: a data-driven criterion reads ``data=`` for its scores (a generator to its
    end), and a call refused after that leaves the caller's generator spent.

    How many channels a group keeps at fewest depends on the rules alone, and where its
    channels cost alike (a group without parts: every channel in all its layers), not
    which: every prunable group cut to its fewest is then the smallest subnet of any
    allocation (the sensitivity grid and the greedy path stop above it, a group the
    criterion cannot score stays whole).  A FLOPs or params budget it exceeds is refused
    with :func:`allocate`'s message.  The channels of a group with parts (layers bound in
    part, chunk inputs) cost as the parts that hold them, and the scores choose them:
    such a group is counted at a channel in each part, the fewest any subnet keeps, so
    the cost is a lower bound and the message says "at least".  A latency budget is
    refused here only where nothing can be pruned; one whose smallest subnet runs too
    slow is found by timing it, after the scores.

    For the sensitivity allocation (``steps``: its grid's; ``greedy``: along a greedy
    path) no group is narrower than the first width of its grid
    (:func:`~razorlib.pruning.sensitivity.grid`), known before any loss is measured: a
    budget out of its reach is refused before the measurement, which costs a loss
    evaluation per group and step.

    Returns:
        the dense model's complexity for a FLOPs or params budget (FLOPs and params,
        counted on ``example_inputs``), for :func:`allocate`'s ``dense=`` so that it is
        counted once; None for a latency budget.

    Raises:
        ValueError: the budget cannot be met; nothing is changed.
    """
    metric, target = budget_of(flops=flops, params=params, latency=latency)
    groups = list(pruner._require_prepared().prunable.values())
    measured = None if steps is None else 'greedy' if greedy else 'sensitivity'
    fewest = {g.id: rule.allowed(g)[0] if steps is None else grid(g, rule, steps)[0]
              for g in groups}
    if metric == 'latency':
        if target < 1 and all(fewest[g.id] == g.num_channels for g in groups):
            raise _latency_refusal(target, rule, measured)
        return None
    meter = SubnetMeter(pruner, example_inputs)
    full = {g.id: np.ones(g.num_channels, dtype=bool) for g in groups}
    smallest = {g.id: g.keep_best(np.arange(g.num_channels), 1 if g.parts else fewest[g.id])
                for g in groups}
    dense = meter(full)
    least = getattr(meter(smallest, metric == 'flops'), metric)
    if least > within(target, getattr(dense, metric)):
        raise _cost_refusal(metric, target, _describe_rules(rule, measured), least,
                            getattr(dense, metric), bound=any(g.parts for g in groups))
    return dense


def allocate(pruner: Any, scores: Optional[Dict[str, np.ndarray]] = None, *,
             ratio: Optional[float] = None, flops: Optional[float] = None,
             params: Optional[float] = None, latency: Optional[float] = None,
             global_ranking: bool = False, round_to: int = 1,
             max_ratio: Optional[float] = None, example_inputs: Any = None,
             runtime: Union[RuntimeArg, SubnetLatency] = 'torch',
             sensitivity: Optional[Sensitivity] = None,
             path: Optional[GreedyPath] = None,
             dense: Optional[Complexity] = None) -> Allocation:
    """Choose each group's kept channels for one budget; the pruner's masks are left as
    they were (``pruner.set_subnet(allocation.subnet)`` applies it).

    Args:
        pruner: a prepared :class:`~razorlib.pruning.StructurePruner`.
        scores: per group id, a score per channel (higher: keep); default the ranks of
            ``pruner.channel_orders()`` (enough for a local allocation).  Groups not
            named are kept whole.
        ratio: keep this fraction of each group's channels (local), or of all channels
            (global).  ``flops``/``params``: keep at most this fraction of the dense
            model's FLOPs / params.  ``latency``: at most this fraction of the dense
            model's latency measured on ``runtime``.  One of them; ratio 0.5 if none.
        global_ranking: rank all groups' channels together (scores must be comparable
            across groups: see the criteria's ``normalize``).
        round_to, max_ratio: see :class:`WidthRule`.
        example_inputs: the inputs FLOPs are counted and latency measured on.
        runtime: where ``latency`` is measured: ``'torch'`` (eager CPU),
            ``'onnxruntime'`` (CPU), ``'cuda'``, a config dict
            (``dict(type='onnxruntime', repeat=50)``), a
            :class:`~razorlib.pruning.runtimes.Runtime`, or a ready
            :class:`~razorlib.pruning.latency.SubnetLatency` (its table and options) of
            this ``pruner`` and ``example_inputs``.
        sensitivity: allocate by loss sensitivity: group id -> kept count -> loss
            increase (:func:`~razorlib.pruning.sensitivity.measure_sensitivity`); each
            group then keeps its best channels (by ``scores``) at the fewest the common
            threshold allows.  Not with ``global_ranking``.
        path: allocate along a greedy path (group id -> kept count, from the dense model
            down: :func:`~razorlib.pruning.sensitivity.measure_greedy_path`): the first
            subnet on it that meets the budget.  Not with ``global_ranking`` or
            ``sensitivity``.
        dense: the dense model's complexity on ``example_inputs`` where it was counted
            already (:func:`refuse_unreachable` returns it); else counted here.

    Raises:
        ValueError: the budget cannot be met; the message names the smallest value the
            rules allow.  Or ``runtime`` is a ``SubnetLatency`` of another pruner or
            other inputs; the message names which.
    """
    metric, target = budget_of(ratio, flops, params, latency)
    global_ranking = switch(global_ranking, 'global_ranking')
    if sum((sensitivity is not None, path is not None, global_ranking)) > 1:
        raise ValueError('choose one allocation: global_ranking ranks scores across groups, '
                         'sensitivity sets each group\'s width by its measured loss, a greedy '
                         'path by its measured cuts')
    rule = WidthRule(round_to, max_ratio)
    prunable = pruner._require_prepared().prunable
    if scores is None:
        if global_ranking:
            raise ValueError(f'{type(pruner).__name__} ranks channels by position, not by '
                             'score; global ranking needs an importance criterion '
                             '(ImportancePruner)')
        scores = {gid: -np.argsort(order, kind='stable').astype(float)
                  for gid, order in pruner.channel_orders().items()}
    groups = [g for gid, g in prunable.items() if gid in scores]
    unscored = [gid for gid in prunable if gid not in scores]
    if path is not None and (not path or path[0] != {g.id: g.num_channels for g in groups}):
        raise ValueError('a greedy path starts at the dense model: every scored group at its '
                         'full width')
    family = _Family(groups, scores, rule, global_ranking, sensitivity, path)
    if metric == 'ratio':
        total = sum(g.num_channels for g in groups)

        def kept(index: int) -> float:
            return channels(family.counts(index))

        def channels(counts: Dict[str, int]) -> float:
            return sum(counts.values())

        # a budget over all channels (not one ratio per group, which the rules round)
        if not family.local and kept(0) > within(target, total):
            least = kept(0) / total
            raise ValueError(f'ratio={target:g} cannot be met: the smallest subnet allowed '
                             f'({_describe_rules(rule, _measured(family))}) keeps '
                             f'{least:.4f} of the channels; '
                             f'ask for ratio>={math.ceil(least * 1e4) / 1e4:.4f}, or lower '
                             'round_to / raise max_ratio.' + _unscored_note(unscored) +
                             ' Nothing was changed.')
        if not family.local:  # at most the fraction asked
            index = _largest_within(kept, family.size, within(target, total))
            return _result(family, _filled(family, index, channels, within(target, total)),
                           unscored, None, None, None)
        # one ratio per group, each rounded to the nearest width the rules allow
        _check_common_ratio(family, target, unscored)
        return _result(family, family.counts_at_ratio(target), unscored, None, None, target)
    meter = SubnetMeter(pruner, example_inputs)
    measure_flops = metric == 'flops'
    full = {gid: np.ones(g.num_channels, dtype=bool) for gid, g in prunable.items()}
    if metric == 'latency':
        return _allocate_latency(family, full, unscored, meter, target, runtime, rule, dense)
    if dense is None:
        dense = meter(full)
    limit = within(target, getattr(dense, metric))
    # keyed by the groups' kept counts; every group whole is the dense model
    whole = tuple(g.num_channels for g in groups)
    cache: Dict[tuple, float] = {whole: getattr(dense, metric)}

    def cost(index: int) -> float:
        return cost_of(family.counts(index))

    def cost_of(counts: Dict[str, int]) -> float:
        key = tuple(counts.values())
        if key not in cache:
            cache[key] = getattr(meter({**full, **family.keep(counts)}, measure_flops), metric)
        return cache[key]

    if cost(0) > limit:
        raise _cost_refusal(metric, target, _describe_rules(rule, _measured(family)), cost(0),
                            getattr(dense, metric), unscored)
    index = _largest_within(cost, family.size, limit)
    counts = _filled(family, index, cost_of, limit)
    pruned = dense if tuple(counts.values()) == whole else meter({**full, **family.keep(counts)})
    return _result(family, counts, unscored, dense, pruned, family.ratio(index))


def _allocate_latency(family: _Family, full: Keep, unscored: List[str], meter: SubnetMeter,
                      target: float, runtime: Union[RuntimeArg, SubnetLatency],
                      rule: WidthRule, dense: Optional[Complexity]) -> Allocation:
    """The largest candidate whose latency, measured on ``runtime``, meets ``target``.

    A budget below 1 when the rules leave nothing to prune (the smallest candidate is
    the dense model) is refused before anything is measured: timing the dense model
    against itself would only report noise.  So is a ready ``SubnetLatency`` of another
    pruner or other inputs: it would slice and time its own, not the ones allocated."""
    if isinstance(runtime, SubnetLatency):
        runtime.check_matches(meter.pruner, meter.example_inputs)
        timer = runtime
    else:
        timer = SubnetLatency(meter.pruner, meter.example_inputs, runtime)
    if target < 1 and family.counts(0) == family.counts(family.size):
        raise _latency_refusal(target, rule, _measured(family))
    choice = timer.search(lambda i: {**full, **family.keep(family.counts(i))}, family.size,
                          target)
    counts = family.counts(choice.index)
    result = _result(family, counts, unscored, meter(full) if dense is None else dense,
                     meter({**full, **family.keep(counts)}),
                     family.ratio(choice.index))
    result.latency = choice
    return result


def _result(family: _Family, counts: Dict[str, int], unscored: List[str],
            dense: Optional[Complexity], pruned: Optional[Complexity],
            ratio: Optional[float]) -> Allocation:
    subnet = family.keep(counts)
    kept = {gid: (int(keep.sum()), keep.size) for gid, keep in subnet.items()}
    return Allocation(subnet, kept, dense, pruned, ratio, unscored)
