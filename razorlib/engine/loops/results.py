"""What a search evaluates: one record per subnet, and the Pareto front of a set."""
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from .width_space import Widths

#: Which way a score is better: ``'greater'`` (accuracy) or ``'less'`` (a loss).
SCORE_RULES = ('greater', 'less')


@dataclass
class SubnetRecord:
    """One evaluated subnet.

    Args:
        widths: kept channels per space.
        flops: FLOPs of the subnet (multiply-accumulates).
        params: parameters of the subnet.
        score: the search metric (e.g. top-1 in percent) on the data it was scored on.
        tag: where it came from, e.g. ``'greedy step 3'`` or ``'generation 2'``.
        metrics: every metric of the evaluation, ``score`` among them.

    Example:
        >>> record = SubnetRecord({'conv1': 8}, flops=1000, params=50, score=91.5)
        >>> SubnetRecord.from_dict(record.to_dict()) == record
        True
    """
    widths: Widths
    flops: int
    params: int
    score: float
    tag: str = ''
    metrics: Dict[str, float] = field(default_factory=dict)

    def value(self, key: Optional[str] = None) -> float:
        """``metrics[key]``, or the score when ``key`` is None."""
        return self.score if key is None else self.metrics[key]

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> 'SubnetRecord':
        return cls(**data)


@dataclass
class SearchResult:
    """What a search loop's ``run`` returns.

    Args:
        records: every subnet scored during the search, in order.
        chosen: the subnets the search picked, by name (also their file stems).
        files: the channel config written for each chosen subnet.
        history: the search's course: the subnet kept after each greedy step, or the
            best subnet after each generation.
    """
    records: List[SubnetRecord]
    chosen: Dict[str, SubnetRecord]
    files: Dict[str, Path]
    history: List[SubnetRecord]


def pareto_front(records: Sequence[SubnetRecord], rule: str = 'greater',
                 key: Optional[str] = None) -> List[SubnetRecord]:
    """The records no other record beats on both FLOPs (lower) and score.

    Args:
        records: the evaluated subnets.
        rule: ``'greater'`` or ``'less'``: which way the score is better.
        key: rank by this metric of ``record.metrics`` instead of ``record.score``.

    Returns:
        The front by increasing FLOPs (and so improving score).

    Example:
        >>> records = [SubnetRecord({}, 10, 0, 50.0), SubnetRecord({}, 20, 0, 40.0),
        ...            SubnetRecord({}, 30, 0, 70.0)]
        >>> [r.flops for r in pareto_front(records)]
        [10, 30]
        >>> [r.flops for r in pareto_front(records, rule='less')]
        [10, 20]
    """
    if rule not in SCORE_RULES:
        raise ValueError(f'rule must be one of {SCORE_RULES}, got {rule!r}')
    sign = 1.0 if rule == 'greater' else -1.0
    front: List[SubnetRecord] = []
    for record in sorted(records, key=lambda r: (r.flops, -sign * r.value(key))):
        if not front or sign * record.value(key) > sign * front[-1].value(key):
            front.append(record)
    return front


def nearest(records: Sequence[SubnetRecord], flops: float) -> Optional[SubnetRecord]:
    """The record whose FLOPs are closest to ``flops`` (None if there are none).

    Example:
        >>> nearest([SubnetRecord({}, 10, 0, 1.0), SubnetRecord({}, 30, 0, 2.0)], 24).flops
        30
    """
    return min(records, key=lambda r: abs(r.flops - flops), default=None)
