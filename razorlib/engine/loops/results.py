"""What a search evaluates and returns: one record per subnet, the search's result (and
its results JSON), and the Pareto front of a set of records."""
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from ...pruning import ChannelConfig
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


#: The version of the results JSON that :meth:`SearchResult.to_dict` writes.
RESULTS_VERSION = 1


@dataclass
class SearchResult:
    """What a search loop's ``run`` returns and its ``after_search`` hooks receive.

    :class:`~razorlib.engine.hooks.DumpSubnetHook` writes ``configs`` as YAML files,
    fills ``files`` and writes :meth:`to_dict` as the results JSON; an ``after_search``
    hook that runs before it (a higher priority) can add sections to ``extra``.

    Args:
        records: every subnet scored during the search, in order.
        chosen: the subnets the search picked, by name (also their file stems).
        history: the search's course: the subnet kept after each greedy step, or the
            best subnet after each generation.
        configs: the channel config of each chosen subnet.
        limits: per chosen subnet, the limits it was chosen under, e.g.
            ``{'flops': 1.2e6}`` (a greedy target, or an evolution's constraints).
        meta: what a reader of the results needs to know about the search: ``search``
            (the loop's type), ``score_key``, ``score_rule``, ``tie_break_key`` and
            ``val_batches``.
        files: the file of each chosen subnet, once written.
        extra: more sections of the results JSON, by name.

    Example:
        >>> record = SubnetRecord({'conv': 4}, flops=1000, params=50, score=91.5)
        >>> result = SearchResult([record], {'best_subnet': record}, [record],
        ...                       limits={'best_subnet': {'flops': 1200.0}},
        ...                       meta=dict(search='EvolutionSearchLoop', score_rule='greater'))
        >>> result.files['best_subnet'] = Path('work_dir/best_subnet.yaml')
        >>> entry = result.to_dict(Path('work_dir'))['chosen']['best_subnet']
        >>> entry['file'], entry['limits'], entry['flops'], entry['score']
        ('best_subnet.yaml', {'flops': 1200.0}, 1000, 91.5)
    """
    records: List[SubnetRecord]
    chosen: Dict[str, SubnetRecord]
    history: List[SubnetRecord]
    configs: Dict[str, ChannelConfig] = field(default_factory=dict)
    limits: Dict[str, Dict[str, float]] = field(default_factory=dict)
    meta: Dict[str, Any] = field(default_factory=dict)
    files: Dict[str, Path] = field(default_factory=dict)
    extra: Dict[str, Any] = field(default_factory=dict)

    def to_dict(self, folder: Optional[Path] = None) -> Dict[str, Any]:
        """The results JSON: ``meta``, then per chosen subnet its ``file`` (relative to
        ``folder``, where the JSON goes), ``limits`` and record (``flops``, ``params``,
        ``score``, ``metrics``, ``widths``, ``tag``), the ``history``, the Pareto
        front of ``records`` (by ``meta['score_rule']``), the records and ``extra``."""
        chosen = {}
        for name, record in self.chosen.items():
            path = self.files.get(name)
            if path is not None and folder is not None:
                path = os.path.relpath(path, folder)
            chosen[name] = dict(file=None if path is None else str(path),
                                limits=self.limits.get(name, {}), **record.to_dict())
        rule = self.meta.get('score_rule', 'greater')
        return dict(version=RESULTS_VERSION, **self.meta, chosen=chosen,
                    history=[r.to_dict() for r in self.history],
                    pareto_front=[r.to_dict() for r in pareto_front(self.records, rule)],
                    records=[r.to_dict() for r in self.records], **self.extra)


def pareto_front(records: Sequence[SubnetRecord], rule: str = 'greater',
                 key: Optional[str] = None) -> List[SubnetRecord]:
    """The records no other record beats on both FLOPs (lower) and score; a NaN score
    is on no front (it compares false with every score, and would hide the front).

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
    scored = [r for r in records if not math.isnan(r.value(key))]
    for record in sorted(scored, key=lambda r: (r.flops, -sign * r.value(key))):
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
