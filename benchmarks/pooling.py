"""What the benchmarks that pool runs share: a mean with its standard error, and the
verdict of a target on such means.

A benchmark run measures one trained model; another model trained by the same recipe
can turn a small difference around (runs 9-12 of ``ptq_passes.py`` and 15-18 of
``prune_quality.py`` in benchmarks/README.md).  Their ``--pool`` options average a
figure over runs, one model each, and give the spread of that mean.
"""
from typing import Dict, List, Sequence, Tuple


def mean_and_error(values: Sequence[float]) -> Tuple[float, float]:
    """The mean and its standard error, from the sample's variance (n - 1; 0 for one
    value).

    Example:
        >>> [round(v, 3) for v in mean_and_error([97.0, 97.2, 97.4])]
        [97.2, 0.115]
    """
    mean = sum(values) / len(values)
    spread = sum((v - mean) ** 2 for v in values) / max(len(values) - 1, 1)
    return mean, (spread / len(values)) ** 0.5


def verdict(per_run: Sequence[Sequence[float]],
            bounds: Sequence[Tuple[float, int]]) -> Dict[str, object]:
    """A pooled target over several figures: each figure's mean and standard error
    over the runs, whether the target holds on the means (*holds*), whether every mean
    is short of its bound by at most two standard errors (*close*), and in how many
    runs it holds (*held_in*).

    ``per_run`` has one row per run, one value per figure; ``bounds`` one
    ``(bound, sense)`` per figure: ``sense`` +1 holds at or above the bound, -1 at or
    below it.

    Example (a top-1 difference to keep at or above 0 and a KL difference at or below
    0, over three runs):
        >>> v = verdict([(0.2, -0.001), (-0.1, 0.002), (0.5, -0.004)], [(0, 1), (0, -1)])
        >>> [tuple(round(x, 4) for x in m) for m in v['means']], v['holds'], v['close']
        ([(0.2, 0.1732), (-0.001, 0.0017)], True, True)
        >>> v['held_in']
        2
    """
    means: List[Tuple[float, float]] = [mean_and_error([row[i] for row in per_run])
                                        for i in range(len(bounds))]

    def short(values: Sequence[float], slack: Sequence[float]) -> bool:
        return any(sense * (value - bound) + gap < 0
                   for value, gap, (bound, sense) in zip(values, slack, bounds))

    zeros = [0.0] * len(bounds)
    return dict(means=means,
                holds=not short([m for m, _ in means], zeros),
                close=not short([m for m, _ in means], [2 * e for _, e in means]),
                held_in=sum(not short(row, zeros) for row in per_run))
