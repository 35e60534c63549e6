"""GreedySearchLoop: AutoSlim's greedy slimming of a trained supernet to FLOPs targets."""
import numbers
from typing import Dict, Sequence

import torch

from ...registry import LOOPS
from ...utils.complexity import human
from ..config import ConfigError, check_integers
from .base_search_loop import BaseSearchLoop
from .results import SearchResult, SubnetRecord
from .width_space import Widths

Bins = Dict[str, int]


@LOOPS.register_module()
class GreedySearchLoop(BaseSearchLoop):
    """Shrink the supernet one channel bin at a time, always where it hurts least.

    Every space starts with all ``max_channel_bins`` bins (the widest subnet).  Each
    step tries removing one bin from each space that has more than one, scores every
    such candidate (BatchNorm recalibrated, then validated) and keeps the best score
    (``score_rule``; ties: the lower ``tie_break_key`` metric, then the fewer FLOPs); the
    FLOPs never grow from one step to the next.  The first subnet at or under each
    FLOPs target is that target's result, chosen as ``'subnet_flops<target>'``
    (``DumpSubnetHook`` writes ``subnet_flops<target>.yaml``; the results JSON gives
    each one's target as ``limits``).  After each step, the hooks'
    ``after_search_step(step=..., best=<the kept subnet>)`` is called (step 0: the
    widest subnet).

    Cost: a step scores one candidate per space, and reaching the smallest target
    takes up to ``spaces * (max_channel_bins - 1)`` steps, so score on a small fixed
    subset (``val_batches``) with few ``recalib_batches``; subnets already scored are
    not scored again.

    Args:
        runner: the mmengine runner.
        dataloader: the data candidates are scored on, or its config.
        evaluator: the evaluator or its config.
        target_flops: the FLOPs targets (absolute counts), any order, no duplicates.
        max_channel_bins: bins per space; a space keeps ``bins / max_channel_bins``
            of its channels.
        **kwargs: ``recalib_batches``, ``val_batches``, ``calib_dataloader``, ``score_key``,
            ``score_rule``, ``tie_break_key`` and ``seed`` of :class:`BaseSearchLoop`.

    Example:
        >>> search_cfg = dict(type='GreedySearchLoop', target_flops=[120e6, 80e6, 50e6],
        ...                   max_channel_bins=12, recalib_batches=8, val_batches=4)
    """

    def __init__(self, runner, dataloader, evaluator, target_flops: Sequence[float],
                 max_channel_bins: int = 12, **kwargs):
        super().__init__(runner, dataloader, evaluator, **kwargs)
        check_integers(max_channel_bins=max_channel_bins)
        # a single number (target_flops=1e6) is no list of targets: float() of each would
        # fail on it bare, and a string would be taken digit by digit
        if isinstance(target_flops, (str, bytes)) or not isinstance(target_flops, Sequence) \
                or not all(isinstance(t, numbers.Real) and not isinstance(t, bool)
                           for t in target_flops):
            raise ConfigError(f'target_flops must be a list of FLOPs counts, e.g. [1.2e6], '
                              f'got {target_flops!r}')
        targets = [float(t) for t in target_flops]
        if not targets or any(not t > 0 for t in targets) or len(set(targets)) != len(targets):
            raise ConfigError(f'target_flops must be distinct positive FLOPs counts, '
                              f'got {list(target_flops)}')
        if max_channel_bins < 2:
            raise ConfigError(f'max_channel_bins must be >= 2, got {max_channel_bins}')
        self.target_flops = sorted(targets, reverse=True)
        self.max_channel_bins = max_channel_bins
        self._scored: Dict[tuple, SubnetRecord] = {}

    def check_model(self) -> None:
        """Refuse a supernet without a pruner (SPOS, DARTS) as well: the greedy search
        removes channel bins, which only a channel-width supernet (AutoSlim) has.

        Raises:
            ConfigError: ``model: GreedySearchLoop slims ...; <model> has no pruner ...``.
        """
        super().check_model()
        if not hasattr(self.model, 'pruner'):
            raise ConfigError(
                f'model: {type(self).__name__} slims the channel widths of a channel-width '
                f'supernet (AutoSlim, with a pruner); {type(self.model).__name__} has no '
                'pruner: search its op and value choices with EvolutionSearchLoop')

    def widths_at(self, bins: Bins) -> Widths:
        """The subnet ``bins`` stands for, as the pruner's ``set_channel_bins`` sets it."""
        pruner = self.model.pruner
        pruner.set_channel_bins({gid: torch.ones(count) for gid, count in bins.items()},
                                self.max_channel_bins)
        return self.space.widths(pruner.current_subnet)

    def score(self, bins: Bins, tag: str) -> SubnetRecord:
        """Score the subnet ``bins`` stands for, once per distinct subnet."""
        widths = self.widths_at(bins)
        key = self.space.key(widths)
        if key not in self._scored:
            self._scored[key] = self.evaluate(widths, tag)
            self.records.append(self._scored[key])
        return self._scored[key]

    def _check_targets(self) -> None:
        narrowest = self.widths_at({gid: 1 for gid in self.space.sizes})
        flops, _ = self.measure(narrowest)
        if self.target_flops[-1] < flops:
            raise ConfigError(f'target_flops: {human(self.target_flops[-1])} is below the '
                              f'FLOPs of the narrowest subnet (1 of {self.max_channel_bins} '
                              f'bins per space), {human(flops)}')

    def search(self) -> SearchResult:
        """Search; return every scored subnet and the one chosen per target."""
        self._check_targets()
        logger = self.runner.logger
        bins = {gid: self.max_channel_bins for gid in self.space.sizes}
        current = self.score(bins, 'greedy step 0 (widest)')
        self.runner.call_hook('after_search_step', step=0, best=current)
        targets, chosen, history = list(self.target_flops), {}, [current]
        limits: Dict[str, Dict[str, float]] = {}
        while True:
            while targets and current.flops <= targets[0]:
                target = targets.pop(0)
                name = f'subnet_flops{int(target)}'
                chosen[name], limits[name] = current, {'flops': target}
                logger.info(f'{name}: step {len(history) - 1}, FLOPs {human(current.flops)}, '
                            f'{self.score_key} {current.score:.4g}')
            if not targets:
                break
            step = len(history)
            trials = {gid: {**bins, gid: bins[gid] - 1} for gid in bins if bins[gid] > 1}
            candidates = [(self.score(trial, f'greedy step {step} -1 bin {gid}'), trial)
                          for gid, trial in trials.items()]
            current, bins = max(candidates, key=lambda c: (*self.rank(c[0]), -c[0].flops))
            history.append(current)
            logger.info(f'greedy step {step}: keep {bins} bins, FLOPs {human(current.flops)}')
            self.runner.call_hook('after_search_step', step=step, best=current)
        return self.result(chosen, history, limits)
