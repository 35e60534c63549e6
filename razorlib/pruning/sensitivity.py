"""Sensitivity allocation: each group's width from the loss it costs when cut alone.

A common ratio cuts every group alike; a global ranking compares criterion scores across
groups, which only a normalisation makes comparable (and which can starve one group:
``docs/pruning.md``).  Sensitivity allocation, as NVIDIA ModelOpt's FastNAS and
NetAdapt, compares groups on one scale, the loss: each prunable group alone is cut to
its best channels (the criterion's order) at each fraction of a grid, the batch norms
are re-estimated on the data, and the loss on the data is measured.  A group's
*sensitivity* at a width is its loss increase over the dense model's, the dense model
measured alike (its batch norms re-estimated on the same data), made non-increasing in
width (its largest increase at that width or any wider one measured), so a threshold
gives every group one width: the fewest channels whose sensitivity is at most the
threshold.  :func:`~razorlib.pruning.allocate` bisects the threshold for the budget.

It costs up to ``steps - 1`` loss evaluations per group (each re-estimating the batch
norms), and assumes the loss increases of different groups add up, as FastNAS does.

The *greedy* variant (``sensitivity=dict(greedy=True)``: NetAdapt's and AutoSlim's
greedy slimming, on a trained model) drops that assumption: from the dense model, every
group is cut one step of its grid, each cut measured as above on the model as already
cut, and the cut whose loss increase per unit of the budget's cost saved (FLOPs,
params or channels) is smallest is kept; then again, until the budget's cost is reached
(:func:`measure_greedy_path`).  Its path of subnets is the allocation's candidates.  It
costs one evaluation per group per step of the path, and the path has a step for every
grid step cut in all: 12 groups cut to half their width cost about six times the
one-shot table's evaluations.
"""
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np
import torch
import torch.nn as nn

from ..tracing.forward import call_on_batch
from ..utils.batch_norm import preserved_bn_stats, reestimate_bn_stats
from ..utils.modes import evaluating
from .data import LossFn, batch_loss, batch_samples, batch_weights, pair_batches

if TYPE_CHECKING:  # allocation imports this module
    from .allocation import WidthRule

STEPS = 20
"""The grid's steps by default: fractions ``1/20, 2/20, ...`` of each group, FastNAS's 5%."""

__all__ = ['GreedyPath', 'Sensitivity', 'measure_greedy_path', 'measure_sensitivity',
           'threshold_counts']

Sensitivity = Dict[str, Dict[int, float]]
"""Group id -> kept channel count -> loss increase over the dense model."""

GreedyPath = List[Dict[str, int]]
"""Kept channel counts per group id, from the dense model down, each entry one group cut
one step further than the entry before."""


def _mean_loss(model: nn.Module, batches: Sequence[tuple], loss_fn: Optional[LossFn],
               where: str) -> float:
    """The loss over the batches, each batch's (a batch mean) weighed by its samples over
    the mean batch's: every sample counts alike, a trailing partial batch (a
    ``DataLoader``'s ``drop_last=False``) as its samples do, not as a full batch.
    Batches of one size weigh 1 each: the mean of their losses.  Where a batch's samples
    are unknown (:func:`~razorlib.pruning.data.batch_samples`), every batch weighs 1."""
    losses, sizes = [], []
    with torch.no_grad():
        for index, (inputs, targets) in enumerate(batches):
            outputs = call_on_batch(model, inputs, 'sensitivity allocation', index)
            losses.append(float(batch_loss(loss_fn, outputs, targets, 'sensitivity allocation',
                                           f' on batch {index}{where}')))
            sizes.append(batch_samples((inputs, targets)))
    if not all(sizes):  # None or 0: unknown, so batches weigh alike
        sizes = [1] * len(losses)
    return sum(loss * weight for loss, weight in zip(losses, batch_weights(sizes))) / len(losses)


def measure_sensitivity(pruner: Any, orders: Mapping[str, np.ndarray], data: Any,
                        loss_fn: Optional[LossFn] = None,
                        rule: Optional['WidthRule'] = None, steps: int = STEPS) -> Sensitivity:
    """The loss increase of every group in ``orders`` cut alone to each width of a grid.

    Args:
        pruner: a prepared :class:`~razorlib.pruning.StructurePruner`; its masks and
            the model's batch-norm statistics are put back as they were.
        orders: group id -> its channels, most worth keeping first.
        data: an iterable of ``(inputs, targets)`` batches: the batch norms are
            re-estimated on the inputs and the loss is measured on the batches.
        loss_fn: ``loss_fn(outputs, targets)``; default cross-entropy.
        rule: a :class:`~razorlib.pruning.WidthRule`: the widths measured are the grid's
            fitted to it.
        steps: the grid's fractions are ``1/steps, 2/steps, ...`` of each group (20:
            FastNAS's 5% steps).

    Returns:
        Group id -> kept count -> loss increase, for every width measured below the full
        one.

    Example:
        >>> from razorlib.pruning import ImportancePruner
        >>> _ = torch.manual_seed(0)
        >>> net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(),
        ...                     nn.Flatten(), nn.LazyLinear(4))
        >>> data = [(torch.randn(16, 3, 6, 6), torch.randint(0, 4, (16, )))]
        >>> _ = net(data[0][0])
        >>> pruner = ImportancePruner()
        >>> pruner.prepare_from_supernet(net, data[0][0][:1])
        >>> table = measure_sensitivity(pruner, pruner.channel_orders(), data, steps=4)
        >>> sorted(table['0'])
        [2, 4, 6]
    """
    rule, batches, groups = _setup(pruner, data, rule, steps)
    model = pruner.model
    previous = pruner.current_subnet
    full = {gid: np.ones(g.num_channels, dtype=bool) for gid, g in groups.items()}
    table: Sensitivity = {}
    with evaluating(model):
        try:
            pruner.set_subnet(full)
            dense = _cut_loss(model, batches, loss_fn, ' (the dense model)')
            for gid, order in orders.items():
                group = groups[gid]
                table[gid] = {}
                for count in grid(group, rule, steps)[:-1]:
                    pruner.set_subnet({**full, gid: group.keep_best(np.asarray(order), count)})
                    cut = _cut_loss(model, batches, loss_fn,
                                    f' (group {gid!r} cut to {count} channels)')
                    table[gid][count] = cut - dense
        finally:
            pruner.set_subnet(previous)
    return table


def measure_greedy_path(pruner: Any, orders: Mapping[str, np.ndarray], data: Any,
                        cost: Callable[[Dict[str, int]], float],
                        loss_fn: Optional[LossFn] = None, rule: Optional['WidthRule'] = None,
                        steps: int = STEPS, until: Optional[float] = None) -> GreedyPath:
    """Greedy slimming: from the dense model, cut the group whose next step costs the
    least loss per unit of ``cost`` saved, measured on the model as already cut; repeat.

    Args:
        pruner: a prepared :class:`~razorlib.pruning.StructurePruner`; its masks and
            the model's batch-norm statistics are put back as they were.
        orders: group id -> its channels, most worth keeping first; the groups cut.
        data: an iterable of ``(inputs, targets)`` batches: the batch norms are
            re-estimated on the inputs and the loss is measured on the batches.
        cost: what the budget counts, of a subnet given as kept counts per group id of
            ``orders`` (FLOPs, params, channels); it must fall when a group is cut.
        loss_fn: ``loss_fn(outputs, targets)``; default cross-entropy.
        rule: a :class:`~razorlib.pruning.WidthRule`: each group's steps are the grid's
            widths fitted to it.
        steps: each group's grid: ``1/steps, 2/steps, ...`` of its channels.
        until: stop once ``cost`` is at most this, the last cut no deeper than that
            needs (any width the rule allows, off the grid too); None: until no group
            can be cut.

    Returns:
        The path: kept counts per group id, the dense model first, then one cut per entry.

    Example:
        >>> from razorlib.pruning import ImportancePruner
        >>> _ = torch.manual_seed(0)
        >>> net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(),
        ...                     nn.Conv2d(8, 8, 3), nn.BatchNorm2d(8), nn.ReLU(),
        ...                     nn.Flatten(), nn.LazyLinear(4))
        >>> data = [(torch.randn(16, 3, 8, 8), torch.randint(0, 4, (16, )))]
        >>> _ = net(data[0][0])
        >>> pruner = ImportancePruner()
        >>> pruner.prepare_from_supernet(net, data[0][0][:1])
        >>> path = measure_greedy_path(pruner, pruner.channel_orders(), data,
        ...                            cost=lambda counts: sum(counts.values()), steps=2,
        ...                            until=12)
        >>> path[0], len(path), sum(path[-1].values())
        ({'0': 8, '3': 8}, 2, 12)
    """
    rule, batches, groups = _setup(pruner, data, rule, steps)
    model = pruner.model
    previous = pruner.current_subnet
    full = {gid: np.ones(g.num_channels, dtype=bool) for gid, g in groups.items()}
    grids = {gid: grid(groups[gid], rule, steps) for gid in orders}
    counts = {gid: groups[gid].num_channels for gid in orders}
    path: GreedyPath = [dict(counts)]

    def keep(state: Dict[str, int]) -> Dict[str, np.ndarray]:
        return {**full, **{gid: groups[gid].keep_best(np.asarray(orders[gid]), count)
                           for gid, count in state.items()}}

    with evaluating(model):
        try:
            pruner.set_subnet(full)
            loss = _cut_loss(model, batches, loss_fn, ' (the dense model)')
            spent = cost(counts)
            while until is None or spent > until:
                best = None
                for gid, widths in grids.items():
                    smaller = [c for c in widths if c < counts[gid]]
                    if not smaller:
                        continue
                    cut = {**counts, gid: smaller[-1]}
                    pruner.set_subnet(keep(cut))
                    increase = _cut_loss(model, batches, loss_fn,
                                         f' (group {gid!r} cut to {smaller[-1]} channels, step '
                                         f'{len(path)} of the greedy path)') - loss
                    saved = spent - cost(cut)
                    # a cut that saves nothing is taken only when no cut saves anything
                    key = (saved <= 0, increase / saved if saved > 0 else increase)
                    if best is None or key < best[0]:
                        best = (key, gid, cut, loss + increase, spent - saved)
                if best is None:
                    break
                _, gid, cut, loss, spent = best
                if until is not None and spent < until:  # the last cut: no deeper than needed
                    cut, spent = widest_within(cut, spent, gid, counts[gid],
                                               rule.allowed(groups[gid]), cost, until)
                counts = cut
                path.append(dict(counts))
        finally:
            pruner.set_subnet(previous)
    return path


def widest_within(counts: Dict[str, int], spent: float, gid: str, upto: int,
                  allowed: Sequence[int], cost: Callable[[Dict[str, int]], float],
                  limit: float) -> tuple:
    """``(counts, cost)`` with group ``gid`` widened to the widest of the ``allowed`` widths
    in ``(counts[gid], upto]`` whose ``cost`` is within ``limit`` (``counts``, costing
    ``spent``, must be): a budget's remainder is kept, not cut away.  The greedy path's
    last cut and the sensitivity allocation's next group (``allocation``) both end here.

    Example:
        >>> widest_within({'a': 2, 'b': 4}, 6, 'a', 8, [1, 2, 4, 6, 8], lambda c: sum(
        ...     c.values()), limit=11)
        ({'a': 6, 'b': 4}, 10)
    """
    widths = [int(c) for c in allowed if counts[gid] < c <= upto]
    lo, hi = 0, len(widths)  # index i > 0 is widths[i - 1]; 0 is ``counts`` as it is
    costs = {0: spent}
    while lo < hi:  # cost does not fall as the width grows: bisect
        mid = (lo + hi + 1) // 2
        costs[mid] = cost({**counts, gid: widths[mid - 1]})
        lo, hi = (mid, hi) if costs[mid] <= limit else (lo, mid - 1)
    return ({**counts, gid: widths[lo - 1]} if lo else counts), costs[lo]


def _setup(pruner: Any, data: Any, rule: Optional['WidthRule'], steps: int) -> tuple:
    """The width rule, the checked batches and the prunable groups of a measurement.

    The batches are read into a list, even from a ``DataLoader``: every cut's loss is
    compared with the dense model's, so all must be measured on the same batches, not
    on each pass's shuffle or random augmentation (and the data is read twice per cut,
    so it must be small anyway)."""
    check_steps(steps)
    from .allocation import WidthRule  # here: allocation imports this module
    return (rule or WidthRule(), list(pair_batches(data, 'sensitivity allocation')),
            pruner._require_prepared().prunable)


def check_steps(steps: Any) -> None:
    """Refuse a grid of ``steps`` that is no whole number of at least 1."""
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise ValueError(f'sensitivity: steps must be an integer of at least 1, got {steps!r}')


def grid(group: Any, rule: 'WidthRule', steps: int) -> List[int]:
    """A group's widths measured: ``1/steps, 2/steps, ...`` of it, fitted to ``rule``,
    ascending, the full width last; the first is the narrowest any sensitivity or
    greedy allocation gives it, known before anything is measured."""
    allowed = rule.allowed(group)
    return sorted({rule.fit(group, max(1.0, k * group.num_channels / steps), allowed)
                   for k in range(1, steps + 1)} | {group.num_channels})


def _cut_loss(model: nn.Module, batches: Sequence[tuple], loss_fn: Optional[LossFn],
              where: str) -> float:
    """The loss of the model as its masks stand, its batch norms re-estimated on the
    batches' inputs (and put back afterwards).

    The dense model is measured this way too: against its stored statistics, which
    need not describe the data, every increase would carry the same offset, and the
    greedy path, dividing each increase by what the cut saves, would take first the
    cut that saves least (the offset negative) or most."""
    with preserved_bn_stats(model):
        try:
            reestimate_bn_stats(model, (inputs for inputs, _ in batches))
        except ValueError as err:  # NaN data: the norms are named, not who measured
            err.add_note(f'sensitivity allocation: re-estimating the batch norms{where}')
            raise
        return _mean_loss(model, batches, loss_fn, where)


def threshold_counts(curve: Mapping[int, float], full: int) -> Dict[int, float]:
    """A group's sensitivity made non-increasing in width: count -> the largest loss
    increase of that count or any larger one measured; the full width ``-inf``.

    Example:
        >>> threshold_counts({2: 0.5, 4: 0.7, 6: 0.1}, 8)
        {8: -inf, 6: 0.1, 4: 0.7, 2: 0.7}
    """
    out = {full: -np.inf}
    worst = -np.inf
    for count in sorted(curve, reverse=True):
        worst = max(worst, curve[count])
        out[count] = worst
    return out
