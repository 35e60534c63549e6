"""ItePruneAlgorithm: prune a step every N training iterations until the target, then
fine-tune (mmrazor's ``ItePruneAlgorithm``)."""
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch

from ..pruning import ImportancePruner
from ..registry import MODELS
from .pruning_base import ModuleOrCfg, PruningAlgorithm, check_schedule_options, \
    labels_of


@MODELS.register_module()
class ItePruneAlgorithm(PruningAlgorithm):
    """Iterative pruning: ``prune_times`` pruning steps, ``step_freq`` training
    iterations apart, each cutting to a budget closer to the pruner's target; the
    iterations after the last step fine-tune the pruned subnet.

    Step ``k`` (1 ... ``prune_times``) prunes to the fraction
    ``1 - (1 - target) * k / prune_times`` of the dense model, in the target's metric
    (channels for ``ratio=``, or FLOPs or params), before iteration
    ``start + (k - 1) * step_freq``.  Each step scores the channels with the pruner's
    criterion on the current weights (a criterion computed from data, such as
    ``'taylor'``, on that iteration's batch) and ranks the channels pruned before last,
    so they stay pruned.  The iterations before ``start`` train the dense model.

    Args:
        architecture: the model to prune, or its config.
        pruner: an ``ImportancePruner`` or its config: its budget is the target
            (``ratio=0.5``, ``flops=0.5`` or ``params=0.5``), with ``importance``,
            ``global_ranking``, ``round_to`` and ``max_ratio``.
        step_freq: training iterations between two pruning steps.
        prune_times: the number of pruning steps.
        start: the iteration of the first step.
        input_shape: ``(C, H, W)`` of one image, for tracing and FLOPs counting.
        data_preprocessor: a preprocessor or its config; default the architecture's.
        init_cfg: mmengine initialisation config.

    Example:
        >>> model = ItePruneAlgorithm(
        ...     architecture=dict(type='ImageClassifier',
        ...                       backbone=dict(type='PlainCNN', channels=(8, 16)),
        ...                       head=dict(type='LinearClsHead', num_classes=10)),
        ...     pruner=dict(type='ImportancePruner', ratio=0.5), prune_times=2,
        ...     input_shape=(3, 8, 8))
        >>> model.schedule()
        [(0, 0.75), (1, 0.5)]
    """

    def __init__(self, architecture: ModuleOrCfg,
                 pruner: Union[ImportancePruner, dict, None] = None, step_freq: int = 1,
                 prune_times: int = 1, start: int = 0,
                 input_shape: Sequence[int] = (3, 224, 224),
                 data_preprocessor: Optional[ModuleOrCfg] = None,
                 init_cfg: Optional[dict] = None):
        # a subclass's own name for start (SlimmingAlgorithm's prune_at), as its config says
        check_schedule_options(type(self).__name__, [
            ('step_freq', step_freq, 1), ('prune_times', prune_times, 1),
            (self._start_option, start, 0)])
        super().__init__(architecture, pruner, input_shape, data_preprocessor, init_cfg)
        self.step_freq, self.prune_times, self.start = int(step_freq), int(prune_times), \
            int(start)
        # The budget of the last pruning step taken (1: none yet), saved in checkpoints:
        # a run resumed with a lower target knows its subnet was pruned to another.
        self.register_buffer('pruned_to', torch.ones((), dtype=torch.float64))

    #: ``pruned_to`` came later: an older checkpoint loads as pruned by no step (its
    #: target is then judged by the kept fraction alone).
    OPTIONAL_STATE_PREFIXES = ('pruned_to', )

    def schedule(self) -> List[Tuple[int, float]]:
        """``(iteration, fraction)`` of every pruning step."""
        _, target = self.target
        return [(self.start + (k - 1) * self.step_freq,
                 1 - (1 - target) * k / self.prune_times)
                for k in range(1, self.prune_times + 1)]

    @property
    def finished(self) -> bool:
        """Whether every pruning step was taken (the rest is fine-tuning)."""
        return int(self.step_count) > self.schedule()[-1][0]

    @property
    def target_met(self) -> bool:
        """Whether the subnet meets the target: it keeps at most the target's fraction of
        the dense model, or a step pruned it to the target's budget.

        The second covers a ratio per group (``ratio=`` without ``global_ranking``): each
        group is rounded to its nearest allowed width, so the kept fraction may end a
        little above the target.  A subnet pruned to an earlier, higher target (a run
        resumed with a lower one after its schedule) meets neither."""
        return super().target_met or float(self.pruned_to) <= self.target[1] + 1e-9

    def remeasure(self) -> bool:
        """Re-measure the restored subnet (see the base class); a checkpoint measured in
        another metric also forgets ``pruned_to``, a step budget in that metric: the
        target is then judged by the kept fraction alone, as for a checkpoint written
        before ``pruned_to`` was saved."""
        changed = super().remeasure()
        if changed:
            self.pruned_to.fill_(1.0)
        return changed

    #: the name of the ``start`` argument in the config (for messages)
    _start_option = 'start'

    def schedule_overrun(self, max_iters: int) -> Optional[str]:
        """Why a run of ``max_iters`` training iterations ends before the last pruning
        step, or with a subnet short of the target because every step was taken before
        (None: neither)."""
        last = self.schedule()[-1][0]
        metric, value = self.target
        if self.finished and not self.target_met:
            return (f'{type(self).__name__}: every pruning step was taken before iteration '
                    f'{int(self.step_count)}, where this run goes on (the last at iteration '
                    f'{last}), but the subnet keeps {float(self.kept_fraction):.4f} of the '
                    f"dense model's {metric}, above the target {metric}={value:g} (pruned "
                    'to an earlier target?): nothing more is pruned. To prune to the target, '
                    f'set {self._start_option} to {int(self.step_count)} or later.')
        if last < max_iters:
            return None
        return (f'{type(self).__name__}: the last pruning step is at iteration {last} '
                f'({self._start_option}={self.start}, prune_times={self.prune_times}, '
                f'step_freq={self.step_freq}), but the run has {max_iters} iterations (0 to '
                f'{max_iters - 1}): the model at its end is not pruned to {metric}='
                f'{value:g}. Lower {self._start_option}, step_freq or prune_times, or train '
                'longer (train_cfg max_epochs / max_iters); a resumed run goes on with '
                'the schedule.')

    def loss(self, inputs: torch.Tensor, data_samples: Optional[list]) -> Dict[str, torch.Tensor]:
        """Prune if this iteration is a step of :meth:`schedule`, then the losses."""
        if self.training:
            steps = dict(self.schedule())
            iteration = int(self.step_count)
            if iteration in steps:
                self.prune_step(steps[iteration], inputs, data_samples)
            self.step_count += 1
        return super().loss(inputs, data_samples)

    def prune_step(self, fraction: float, inputs: Any, data_samples: Optional[list]) -> None:
        """Score the channels now and prune to ``fraction`` of the dense model."""
        batch = None
        if self.pruner.importance.needs_data:
            batch = (inputs, labels_of(data_samples, type(self).__name__).to(inputs.device))
        allocation = self.prune_to(fraction, self.score(batch))
        self.pruned_to.fill_(fraction)
        kept = ', '.join(f'{gid} {k}/{n}' for gid, (k, n) in allocation.kept.items())
        metric, _ = self.target
        self.log(f'iteration {int(self.step_count)}: pruned to {metric} '
                 f'{float(self.kept_fraction):.3f} of the dense model (step budget '
                 f'{fraction:.3f}); kept {kept}')
