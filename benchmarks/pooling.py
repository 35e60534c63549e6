"""What the benchmarks that pool runs share: a mean with its standard error.

A benchmark run measures one trained model; another model trained by the same recipe
can turn a small difference around (runs 9-12 of ``ptq_passes.py`` and 15-18 of
``prune_quality.py`` in benchmarks/README.md).  Their ``--pool`` options average a
figure over runs, one model each, and give the spread of that mean.
"""
from typing import Sequence, Tuple


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
