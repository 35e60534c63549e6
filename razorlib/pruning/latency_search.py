"""The search that meets a latency budget with few whole-model measurements.

Candidates ``0..size`` keep more channels as the index grows (``size``: the dense model).
Each measurement slices a candidate and times it beside the dense model, runs
interleaved, so it yields the candidate's *fraction* of the dense latency, the budget's
unit, unbiased by a load that comes and goes.  Measurements are noisy, but latency does
not fall as channels are added: the fractions are read through their monotone fit
(pool-adjacent-violators), and a measurement that contradicts the order by more than the
tolerance is repeated.  Between two measured candidates that bracket the budget, the
per-layer table (:class:`~razorlib.pruning.latency.SubnetLatency`) predicts which one
meets it: its sums are mapped to measured fractions by the line through the bracket.
"""
import math
from dataclasses import dataclass
from statistics import median
from typing import Any, Callable, Dict, List

import numpy as np

__all__ = ['LatencyChoice', 'search_latency', 'monotone_fit', 'REFUSAL_MEASUREMENTS']

Keep = Dict[str, np.ndarray]


@dataclass
class LatencyChoice:
    """The candidate a latency search chose, with every measurement it made.

    Args:
        index: the candidate's index in the family.
        dense_ms: the dense model's latency, from the first measurement.
        fraction: the chosen candidate's latency over the dense model's (monotone fit of
            the measurements).
        measured: candidate index -> every measured fraction of the dense latency.
    """
    index: int
    dense_ms: float
    fraction: float
    measured: Dict[int, List[float]]

    @property
    def ms(self) -> float:
        """The chosen candidate's latency in milliseconds."""
        return self.fraction * self.dense_ms


def monotone_fit(samples: Dict[int, List[float]]) -> Dict[int, float]:
    """Per index, the non-decreasing fit of the samples' medians (pool adjacent
    violators, weighted by the number of samples).

    Example:
        >>> monotone_fit({0: [0.3], 5: [0.5], 7: [0.4], 9: [1.0]})
        {0: 0.3, 5: 0.45, 7: 0.45, 9: 1.0}
    """
    blocks: List[List[Any]] = []  # [value, weight, indices]
    for index in sorted(samples):
        blocks.append([median(samples[index]), len(samples[index]), [index]])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            value, weight, indices = blocks.pop()
            last = blocks[-1]
            last[0] = (last[0] * last[1] + value * weight) / (last[1] + weight)
            last[1] += weight
            last[2] += indices
    return {i: round(value, 12) for value, _, indices in blocks for i in indices}


def search_latency(timer: Any, subnet: Callable[[int], Keep], size: int,
                   target: float) -> LatencyChoice:
    """The largest candidate whose latency is at most ``target`` of the dense model's.

    The smallest candidate decides whether the budget can be met at all, so one noisy
    measurement of it does not: a first fraction above ``target * (1 + tolerance)`` is
    measured again, up to :data:`REFUSAL_MEASUREMENTS` times in all, until their median
    is within it, and the budget refused on that median only.  A budget the dense
    model meets (``target * (1 + tolerance) >= 1``) is never refused.

    Args:
        timer: a :class:`~razorlib.pruning.latency.SubnetLatency` (``measure``,
            ``predicted_sum``, ``tolerance``, ``max_measurements``, ``runtime``).
        subnet: candidate index -> keep-masks.
        size: the dense model's index.
        target: the budget, a fraction of the dense model's latency.

    Returns:
        The candidate chosen: the largest measured one whose fitted fraction is at most
        ``target * (1 + tolerance)``; the smallest one when its fraction lies between
        ``target`` and that (the tolerance allows it, and nothing smaller is allowed).

    Raises:
        ValueError: the smallest candidate is slower than the budget (its measured
            fraction named; when it is not measurably faster than the dense model, the
            message says so instead of asking for a budget of 1 or more); nothing was
            changed.
    """
    tol = timer.tolerance
    limit = target * (1 + tol)
    dense_ms, low_ms = timer.measure([subnet(size), subnet(0)])
    samples: Dict[int, List[float]] = {size: [1.0], 0: [low_ms / dense_ms]}
    if samples[0][0] > limit >= 1:  # the dense model meets the budget: nothing to refuse
        return LatencyChoice(size, dense_ms, 1.0, dict(sorted(samples.items())))
    while samples[0][0] > limit and len(samples[0]) < REFUSAL_MEASUREMENTS:
        again_low, again_dense = timer.measure([subnet(0), subnet(size)])  # the other order
        samples[0].append(again_low / again_dense)
        if median(samples[0]) <= limit:
            break
    if median(samples[0]) > limit:
        _refuse(timer, target, median(samples[0]), len(samples[0]), low_ms, dense_ms)

    def measure(index: int) -> None:
        candidate_ms, now_dense_ms = timer.measure([subnet(index), subnet(size)])
        samples.setdefault(index, []).append(candidate_ms / now_dense_ms)

    budget = timer.max_measurements
    while budget > 0 and target < 1:
        fit = monotone_fit(samples)
        below = [i for i, f in fit.items() if f <= target]
        if not below:  # the smallest is above the budget, within its tolerance: the choice
            break
        lo = max(below)
        hi = min(i for i, f in fit.items() if f > target or i == size)
        if (hi - lo <= 1 or fit[lo] >= target * (1 - tol) or fit[hi] <= limit):
            break
        index = _predicted_index(timer, subnet, lo, hi, fit, target)
        measure(index)
        budget -= 1
        if budget > 0 and _contradicts(samples, index, tol):
            measure(index)  # a second look at a measurement out of order
            budget -= 1
    fit = monotone_fit(samples)
    within = [i for i, f in fit.items() if f <= limit]
    if not within:  # cannot happen: the fit at 0 is at most the median measured there
        _refuse(timer, target, fit[0], len(samples[0]), low_ms, dense_ms)
    index = max(within)
    return LatencyChoice(index, dense_ms, fit[index], dict(sorted(samples.items())))


#: How many times the smallest candidate is measured before a budget is refused.
REFUSAL_MEASUREMENTS = 3


def _refuse(timer: Any, target: float, fraction: float, count: int, low_ms: float,
            dense_ms: float) -> None:
    """Raise the error of a budget the smallest candidate does not meet."""
    runs = (f'{fraction:.4f} of the dense model\'s latency (the median of {count} '
            f'measurements; the first {low_ms:.3f} ms of {dense_ms:.3f} ms)' if count > 1 else
            f'{fraction:.4f} of the dense model\'s latency ({low_ms:.3f} ms of '
            f'{dense_ms:.3f} ms)')
    head = (f'latency={target:g} cannot be met on {timer.runtime.name}: the smallest subnet '
            f'allowed runs at {runs}')
    least = math.ceil(fraction * 1e3) / 1e3
    if least >= 1:  # no budget below 1 to suggest
        raise ValueError(f'{head}: pruning under these rules does not make the model '
                         f'measurably faster on {timer.runtime.name}; lower round_to / raise '
                         'max_ratio, or prune to a flops= or params= budget. Nothing was '
                         'changed.')
    raise ValueError(f'{head}; ask for latency>={least:.3f}, or lower round_to / raise '
                     'max_ratio. Nothing was changed.')


def _contradicts(samples: Dict[int, List[float]], index: int, tol: float) -> bool:
    """Whether ``index``'s measurement is faster than a smaller candidate's or slower
    than a larger one's by more than ``tol``."""
    value = median(samples[index])
    return any((i < index and median(s) > value * (1 + tol)) or
               (i > index and median(s) < value * (1 - tol)) for i, s in samples.items())


def _predicted_index(timer: Any, subnet: Callable[[int], Keep], lo: int, hi: int,
                     fit: Dict[int, float], target: float) -> int:
    """The largest index in ``(lo, hi)`` predicted to meet ``target``: the table's sums
    mapped to fractions by the line through the fitted ``lo`` and ``hi``."""
    s_lo, s_hi = timer.predicted_sum(subnet(lo)), timer.predicted_sum(subnet(hi))
    slope = (fit[hi] - fit[lo]) / (s_hi - s_lo) if s_hi != s_lo else 0.0

    def fraction(i: int) -> float:
        return fit[lo] + slope * (timer.predicted_sum(subnet(i)) - s_lo)
    a, b = lo, hi
    while b - a > 1:
        mid = (a + b) // 2
        a, b = (mid, b) if fraction(mid) <= target else (a, mid)
    return min(max(a, lo + 1), hi - 1)  # both ends are measured: a new candidate
