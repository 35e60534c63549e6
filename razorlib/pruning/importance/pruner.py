"""ImportancePruner: rank each group's channels by a criterion and keep them to a budget."""
from collections.abc import Iterator
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import torch
import torch.nn as nn

from ...registry import PRUNERS
from ...tracing import ChannelGroup
from ...tracing.forward import default_example_inputs
from ...utils.checks import switch
from ...utils.complexity import Complexity
from ..allocation import (Allocation, SubnetMeter, WidthRule, allocate, budget_of,
                          refuse_unreachable)
from ..data import pair_batches
from ..latency import SubnetLatency
from ..runtimes import Runtime, RuntimeArg, check_runtime
from ..sensitivity import STEPS, check_steps, measure_greedy_path, measure_sensitivity
from ..structure import StructurePruner, SubnetDict
from .base import ImportanceArg, ImportanceContext, build_importance

__all__ = ['ImportancePruner']


@PRUNERS.register_module()
class ImportancePruner(StructurePruner):
    """Keeps, in each space, the channels an importance criterion ranks best, to a
    ratio, FLOPs, params or latency budget, locally or globally.

    Args:
        ratios: the fraction of channels to keep (default 0.5 when neither ``flops`` nor
            ``params`` is given), or a sequence that :meth:`sample_subnet` draws from
            (``ratio=`` is the same argument).
        importance: a criterion: registered name (``'l1'``, ``'taylor'``, ...), config
            dict or :class:`~razorlib.pruning.importance.Importance`.
        global_ranking: rank all groups' channels together in :meth:`allocate`; True or
            False (a string such as ``'no'``, true to ``bool()``, is refused).
        sensitivity: allocate by each group's measured loss sensitivity in
            :meth:`allocate` (:mod:`razorlib.pruning.sensitivity`; it needs ``data``),
            True or a dict of options: ``steps`` (each group's grid, default 20) and
            ``greedy`` (re-measure every group after each cut and take the cheapest in
            loss per unit of the budget's cost saved: NetAdapt's greedy slimming).
        flops, params, latency: the budget of :meth:`allocate` as a fraction of the
            dense model's FLOPs, params or latency measured on ``runtime`` (instead of a
            ratio).
        runtime: where ``latency`` is measured: ``'torch'``, ``'onnxruntime'``,
            ``'cuda'``, a config dict or a :class:`~razorlib.pruning.runtimes.Runtime`; a
            name or config dict is checked here (anything else that is no runtime is
            refused here too), whatever the budget.
        round_to: each leader layer keeps a multiple of this many channels (or all).
        max_ratio: the largest fraction of a group that may be pruned.
        **kwargs: :class:`~razorlib.pruning.StructurePruner`'s (``except_start_keys``,
            ``strict``, ``verify``, ``layer_kinds``).

    Example:
        >>> net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(),
        ...                     nn.Conv2d(8, 16, 3), nn.ReLU(), nn.Conv2d(16, 4, 1))
        >>> pruner = ImportancePruner(importance='l2', flops=0.5, round_to=2)
        >>> pruner.prepare_from_supernet(net, torch.randn(1, 3, 8, 8))
        >>> allocation = pruner.allocate()
        >>> allocation.fraction('flops') <= 0.5, allocation.kept['0'][0] % 2
        (True, 0)
    """

    def __init__(self, ratios: Union[float, Sequence[float], None] = None,
                 importance: ImportanceArg = 'l1', global_ranking: bool = False,
                 flops: Optional[float] = None, params: Optional[float] = None,
                 latency: Optional[float] = None, runtime: RuntimeArg = 'torch',
                 round_to: int = 1, max_ratio: Optional[float] = None,
                 sensitivity: Union[bool, Mapping[str, Any]] = False, **kwargs: Any):
        has_ratio = ratios is not None or kwargs.get('ratio') is not None
        has_budget = any(b is not None for b in (flops, params, latency))
        if has_ratio and has_budget:
            raise ValueError('give one budget: a ratio, flops, params or latency')
        if has_budget:
            budget_of(flops=flops, params=params, latency=latency)  # one, in (0, 1]
        if not has_ratio:
            ratios = 1.0 if has_budget else 0.5
        super().__init__(ratios=ratios, **kwargs)
        self.importance = build_importance(importance)
        self.global_ranking = switch(global_ranking, 'global_ranking')
        if not isinstance(sensitivity, (bool, Mapping)):
            raise TypeError(f"sensitivity: True, False or a dict of options ('steps', "
                            f"'greedy'), got {sensitivity!r}")
        if sensitivity is not False and self.global_ranking:
            raise ValueError('choose one allocation: global_ranking=True or sensitivity')
        unknown = (sorted(set(sensitivity) - {'steps', 'greedy'})
                   if isinstance(sensitivity, Mapping) else [])
        if unknown:
            raise ValueError(f'sensitivity: unknown option {unknown[0]!r}; the options are '
                             "'steps' and 'greedy'")
        if isinstance(sensitivity, Mapping) and not isinstance(sensitivity.get('greedy', False),
                                                               bool):
            raise ValueError(f"sensitivity: greedy is True or False, got "
                             f"{sensitivity['greedy']!r}")
        if isinstance(sensitivity, Mapping):
            check_steps(sensitivity.get('steps', STEPS))
        #: the sensitivity allocation's options ({} for its defaults), or None when off
        self.sensitivity: Optional[Dict[str, Any]] = (
            dict(sensitivity) if isinstance(sensitivity, Mapping)
            else {} if sensitivity else None)
        if not isinstance(runtime, (Runtime, SubnetLatency)):
            check_runtime(runtime)  # a misspelt runtime (or none) fails here, not once timed
        self.flops, self.params, self.latency, self.runtime = flops, params, latency, runtime
        self.rule = WidthRule(round_to, max_ratio)
        self._scores: Optional[Dict[str, np.ndarray]] = None
        self._example_inputs: Any = None
        self._checked: Optional[Tuple[tuple, Optional[Complexity]]] = None

    def prepare_from_supernet(self, supernet: nn.Module, example_inputs: Any = None) -> None:
        if example_inputs is None:
            example_inputs = default_example_inputs(supernet)
        super().prepare_from_supernet(supernet, example_inputs)
        self._example_inputs, self._scores, self._checked = example_inputs, None, None

    def check_budget(self) -> Optional[Complexity]:
        """Refuse a ``flops``, ``params`` or ``latency`` budget the width rules cannot
        meet whatever the scores
        (:func:`~razorlib.pruning.allocation.refuse_unreachable`), before any score is
        computed: :meth:`allocate` given ``data`` calls it first, so that a data-driven
        criterion does not read ``data`` (a generator to its end) for a refusal.  Without
        ``data`` the allocation's own refusal comes as soon, and names the exact least
        cost where this one can only bound it (a group whose channels sit in several
        parts).  With ``sensitivity``, no group is narrower than its grid's first width,
        so a budget out of the grid's reach is refused before the loss measurement too.
        A ratio is left to :meth:`allocate`: which groups it spans depends on which ones
        the criterion scores.

        Returns:
            the dense model's complexity for a FLOPs or params budget (kept for
            :meth:`allocate`, counted once per budget and rules until the next
            preparation), else None.

        Raises:
            ValueError: the budget cannot be met; the message names the smallest value
                the rules allow.  Nothing is changed.
        """
        self._require_prepared()
        measured = None if self.sensitivity is None else \
            (self.sensitivity.get('steps', STEPS), self.sensitivity.get('greedy', False))
        key = (self.flops, self.params, self.latency, self.rule.round_to, self.rule.max_ratio,
               measured)
        if self._checked is None or self._checked[0] != key:
            steps, greedy = measured or (None, False)
            dense = refuse_unreachable(self, self.rule, flops=self.flops, params=self.params,
                                       latency=self.latency, example_inputs=self._example_inputs,
                                       steps=steps, greedy=greedy) \
                if self.has_budget else None
            self._checked = (key, dense)
        return self._checked[1]

    # ------------------------------------------------------------------ scores
    def score(self, data: Optional[Any] = None,
              loss_fn: Optional[Callable[[Any, Any], torch.Tensor]] = None
              ) -> Dict[str, np.ndarray]:
        """Score every prunable group's channels on the model as its masks stand.

        Args:
            data: an iterable of ``(inputs, targets)`` batches, for criteria that run
                the model (``taylor``, ``fisher``, ``activation``, ``apoz``).
            loss_fn: ``loss_fn(outputs, targets)``; default cross-entropy.

        Returns:
            group id -> one score per channel (higher: keep), for each group the
            criterion could score.  A data-driven criterion's scores are kept for
            :meth:`channel_orders` until the next call or preparation.
        """
        groups = self._require_prepared().prunable
        scores: Dict[str, np.ndarray] = {}
        if groups:  # without a group to score, a criterion run on the data finds no layer
            ctx = ImportanceContext.from_pruner(self, data=data, loss_fn=loss_fn,
                                                measure=SubnetMeter(self, self._example_inputs))
            scores = self.importance(ctx)
        for gid, values in scores.items():
            if not np.isfinite(values).all():
                raise ValueError(f'{self.importance!r} scored channels of group {gid!r} (layers '
                                 f'{", ".join(groups[gid].layers[:3])}) NaN or infinite: the '
                                 'weights or the data hold NaN or infinite values')
        if self.importance.needs_data:
            self._scores = scores
        return scores

    def group_scores(self) -> Dict[str, np.ndarray]:
        """The criterion's scores per group: computed now from the weights, or those of
        the last :meth:`score` call for a data-driven criterion."""
        if not self.importance.needs_data:
            return self.score()
        if self._scores is None:
            raise RuntimeError(f'{self.importance!r} is computed from data: call '
                               'pruner.score(data=...) first')
        return self._scores

    def channel_orders(self) -> Dict[str, np.ndarray]:
        scores = self.group_scores()
        return {gid: (np.argsort(-scores[gid], kind='stable') if gid in scores
                      else np.arange(g.num_channels))
                for gid, g in self._require_prepared().prunable.items()}

    # ------------------------------------------------------------------ subnets
    def keep_ratio(self, group: ChannelGroup, ratio: float, order: np.ndarray) -> torch.Tensor:
        """Keep-mask of the best ``ratio * channels`` of ``order``, fitted to ``round_to``
        and ``max_ratio``: the allowed count nearest it, the larger on a tie (see
        :class:`~razorlib.pruning.allocation.WidthRule`)."""
        count = self.rule.fit(group, ratio * group.num_channels)
        return torch.from_numpy(group.keep_best(np.asarray(order), count))

    def subnet_at(self, ratios: Union[float, Mapping[str, float]]) -> SubnetDict:
        """As :meth:`StructurePruner.subnet_at`, with ``round_to`` and ``max_ratio``;
        groups the criterion cannot score are kept whole."""
        groups = self._require_prepared().prunable
        if not isinstance(ratios, Mapping):
            ratios = {gid: float(ratios) for gid in groups}
        scores = self.group_scores()
        return {gid: (self.keep_ratio(groups[gid], ratio, np.argsort(-scores[gid], kind='stable'))
                      if gid in scores else torch.ones(groups[gid].num_channels, dtype=torch.bool))
                for gid, ratio in ratios.items()}

    def allocate(self, data: Optional[Any] = None,
                 loss_fn: Optional[Callable[[Any, Any], torch.Tensor]] = None) -> Allocation:
        """The subnet meeting this pruner's budget (its single ratio, ``flops``,
        ``params`` or ``latency``), scored now (on ``data`` for a data-driven criterion, else on the
        data of the last :meth:`score`).  The masks are left as they were:
        ``pruner.set_subnet(allocation.subnet)`` applies it.  A generator of batches is
        read once, and so is a ``DataLoader`` when a sensitivity measurement is asked,
        so the scores and the measurement see the same batches.

        Raises:
            ValueError: the budget cannot be met (the message names the smallest value
                the rules allow), or ``ratios`` holds several ratios.  A FLOPs or params
                budget the rules cannot meet whatever the scores, and a latency budget
                where nothing can be pruned, are refused before ``data`` is read
                (:meth:`check_budget`), whose message may bound the least cost.
        """
        dense = self.check_budget() if data is not None else None  # before data is read
        # an iterator score() would exhaust is read once; a DataLoader is none (asking it
        # for an iterator to tell would start a set of workers for nothing), read once
        # only for a sensitivity measurement, which must cut on the batches scored
        if isinstance(data, Iterator):
            data = list(data)
        elif data is not None and self.sensitivity is not None:
            data = list(pair_batches(data, f'{type(self).__name__}.allocate'))
        if data is None and self.importance.needs_data and self._scores is not None:
            scores = self._scores
        else:
            scores = self.score(data, loss_fn)
        ratio = None
        if not self.has_budget:
            if len(self.ratios) != 1:
                raise ValueError(f'allocate() needs one budget; ratios {self.ratios} are '
                                 'for sample_subnet()')
            ratio = self.ratios[0]
        table = path = None
        if self.sensitivity is not None:
            options = dict(self.sensitivity)
            orders = {gid: np.argsort(-group, kind='stable') for gid, group in scores.items()}
            if options.pop('greedy', False):
                cost, until = self._greedy_cost(orders, ratio, dense)
                path = measure_greedy_path(self, orders, data, cost, loss_fn, self.rule,
                                           until=until, **options)
            else:
                table = measure_sensitivity(self, orders, data, loss_fn, self.rule, **options)
        return allocate(self, scores, ratio=ratio, flops=self.flops, params=self.params,
                        latency=self.latency, global_ranking=self.global_ranking,
                        round_to=self.rule.round_to, max_ratio=self.rule.max_ratio,
                        example_inputs=self._example_inputs, runtime=self.runtime,
                        sensitivity=table, path=path, dense=dense)

    def _greedy_cost(self, orders: Mapping[str, np.ndarray], ratio: Optional[float],
                     dense: Optional[Complexity] = None
                     ) -> Tuple[Callable[[Dict[str, int]], float], Optional[float]]:
        """``(cost, until)`` of the greedy path for this pruner's budget: the channels
        kept for a ratio, params for ``params``, FLOPs for ``flops`` and for ``latency``
        (whose path runs to the end: the latency search measures its candidates);
        ``dense``: the dense model's complexity where :meth:`check_budget` counted it."""
        if ratio is not None:
            total = sum(self.groups.prunable[gid].num_channels for gid in orders)
            return (lambda counts: float(sum(counts.values()))), ratio * total
        metric = 'params' if self.params is not None else 'flops'
        meter = SubnetMeter(self, self._example_inputs)
        groups = self.groups.prunable
        full = {gid: np.ones(g.num_channels, dtype=bool) for gid, g in groups.items()}

        measured: Dict[tuple, float] = {}  # the path starts at the dense model, counted once
        if dense is not None:
            measured[tuple(sorted((gid, groups[gid].num_channels) for gid in orders))] = \
                float(getattr(dense, metric))

        def cost(counts: Dict[str, int]) -> float:
            key = tuple(sorted(counts.items()))
            if key not in measured:
                measured[key] = float(getattr(meter(
                    {**full, **{gid: groups[gid].keep_best(orders[gid], count)
                                for gid, count in counts.items()}}, metric == 'flops'), metric))
            return measured[key]

        if self.latency is not None:
            return cost, None
        whole = cost({gid: groups[gid].num_channels for gid in orders})
        return cost, (self.flops if metric == 'flops' else self.params) * whole

    @property
    def has_budget(self) -> bool:
        """Whether a FLOPs, params or latency budget (not a ratio) is set."""
        return any(b is not None for b in (self.flops, self.params, self.latency))
