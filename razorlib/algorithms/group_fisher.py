"""GroupFisherAlgorithm: Fisher information of channel masks accumulated while
training; every interval the channel (or group step) costing least per unit of cost is
pruned (mmrazor's ``GroupFisherAlgorithm``; Liu et al., "Group Fisher Pruning for
Practical Network Compression", ICML 2021)."""
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from mmengine.dist import all_reduce
from mmengine.logging import MMLogger
from torch.autograd.graph import register_multi_grad_hook

from ..pruning import ImportancePruner
from ..pruning.allocation import SubnetMeter
from ..pruning.importance import FisherImportance, ImportanceContext
from ..pruning.importance.probes import _hooked, per_sample
from ..registry import MODELS
from .pruning_base import ModuleOrCfg, PruningAlgorithm, check_schedule_options


class FisherRecorder:
    """Gates of ones on the tensors a criterion's Fisher cut reads, put into the
    training forward; the backward's gradients of the gates give, per sample and channel,
    ``f_n = sum(a * dL/da)``, summed over every consumer of a group channel (one mask
    shared by the group), and their Fisher ``sum_n f_n**2 / 2`` per group channel.

    The cut (which tensors to gate: consumers' inputs, not a depthwise conv's) is
    :class:`~razorlib.pruning.importance.FisherImportance`'s, so the Fisher accumulated
    while training is the one the ``'fisher'`` criterion computes on given batches.

    Args:
        pruner: the prepared pruner whose groups are scored.
        importance: the Fisher criterion (its cut and ``normalize_by``).
    """

    def __init__(self, pruner: ImportancePruner, importance: FisherImportance):
        self.ctx = ImportanceContext.from_pruner(pruner)
        self.points, self.entries = importance._cut(self.ctx)
        #: indices (in the pruner's prunable groups) of the groups the cut reaches
        self.scored = sorted({g for entry in self.entries for g in entry})

    @contextmanager
    def gating(self, add: Callable[[Dict[int, torch.Tensor]], None]
               ) -> Iterator[Callable[[Dict[str, Any]], Dict[str, Any]]]:
        """Gate the cut's tensors in the forward run inside the block, which passes the
        model's losses through the function it is given.  When the backward has computed
        the gates' gradients, ``add`` gets their Fisher: per group index (in the pruner's
        prunable groups), one float64 value per channel.

        The Fisher is the losses' own: the backward may scale them (an AMP optimiser
        wrapper by its loss scale, 65536 at first, which the Fisher squares; gradient
        accumulation by 1/n), and the gradient it brings the losses is that factor, divided
        out.  ``add`` runs inside the backward, so that the Fisher of a training step is
        counted before a checkpoint that follows it is written."""
        gates: Dict[int, List[torch.Tensor]] = {}
        scales: List[torch.Tensor] = []

        def gate(i: int, tensor: torch.Tensor) -> torch.Tensor:
            if not torch.is_grad_enabled():
                return tensor
            dim = self.points[i].dim % tensor.dim()
            shape = [1] * tensor.dim()
            shape[dim] = tensor.shape[dim]
            if dim != 0:
                shape[0] = tensor.shape[0]
            ones = torch.ones(shape, dtype=tensor.dtype, device=tensor.device,
                              requires_grad=True)
            gates.setdefault(i, []).append(ones)
            return tensor * ones

        with _hooked(self.points, gate):
            yield lambda losses: _watched(losses, scales)
        points = [i for i, calls in gates.items() for _ in calls]
        if points:
            register_multi_grad_hook(
                [ones for calls in gates.values() for ones in calls],
                lambda grads: add(self.fisher_of(points, grads, _loss_scale(scales))))

    def fisher_of(self, points: Sequence[int], grads: Sequence[Optional[torch.Tensor]],
                  scale: torch.Tensor) -> Dict[int, torch.Tensor]:
        """The Fisher ``sum_n f_n**2 / 2`` per group channel of one backward, from the
        gradients ``grads`` of gates put on the cut's tensors ``points`` (None: a gate
        the backward did not reach) of a loss the backward multiplied by ``scale``."""
        per_group: Dict[int, torch.Tensor] = {}
        for i, grad in zip(points, grads):
            if grad is None:
                continue
            rows = per_sample(grad, self.points[i].dim % grad.dim())
            for g, (columns, position) in self.entries[i].items():
                f = per_group.get(g)
                if f is None:
                    f = per_group[g] = rows.new_zeros(
                        rows.shape[0], self.ctx.prunable[g].num_channels, dtype=torch.float64)
                f.index_add_(1, position.to(rows.device), rows[:, columns.to(rows.device)]
                             .double())
        return {g: (f / scale).pow(2).sum(0) / 2 for g, f in per_group.items()}


def _watched(losses: Dict[str, Any], scales: List[torch.Tensor]) -> Dict[str, Any]:
    """``losses`` (a model's loss dict), each one mmengine's ``parse_losses`` sums (named
    ``'loss...'``: a tensor, or a list of them, each averaged) through an identity whose
    gradient, summed, the backward appends to ``scales``: the factor it multiplied the
    summed loss by."""
    def watched(value: Any) -> Any:
        if isinstance(value, (list, tuple)):
            return [watched(v) for v in value]
        if not isinstance(value, torch.Tensor) or not value.requires_grad:
            return value
        # a node of its own: it gets what parse_losses brings it, not also what a returned
        # loss summing it brings
        value = value.view_as(value)
        value.register_hook(lambda grad: scales.append(grad.detach().sum()))
        return value

    return {name: watched(value) if 'loss' in name else value
            for name, value in losses.items()}


def _loss_scale(scales: List[torch.Tensor]) -> torch.Tensor:
    """The one factor the backward multiplied the losses by (their gradients ``scales``);
    refused when it brought them none or unlike ones: the Fisher would keep a factor of
    the optimiser's (an AMP loss scale, squared)."""
    if not scales:
        raise RuntimeError('GroupFisherAlgorithm: the backward reached the channel gates but '
                           "none of the losses the model returned (those named 'loss...'), "
                           'so the factor it scaled them by (an AMP loss scale) is unknown: '
                           'backward the sum of the returned losses')
    found = torch.stack(scales)
    if torch.isfinite(found).all() and not torch.allclose(found, found[0], rtol=1e-4):
        raise RuntimeError(f'GroupFisherAlgorithm: the backward weighed the losses unlike '
                           f'({", ".join(f"{float(s):g}" for s in found)}), so no one loss '
                           'scale can be divided out of the Fisher: backward the sum of the '
                           'returned losses (as parse_losses does), times the loss scale')
    return found[0]


@MODELS.register_module()
class GroupFisherAlgorithm(PruningAlgorithm):
    """GroupFisher pruning while training: Fisher information of channel masks is
    accumulated over ``interval`` iterations, then one channel (or, with the pruner's
    ``round_to``, one step of a group to its next allowed width) is pruned: the one whose
    Fisher per unit of cost is smallest.  Pruning stops once the pruner's target
    (``flops=``, ``params=`` or ``ratio=``) is reached; the rest of the run fine-tunes.

    The cost is the criterion's ``normalize_by``: ``'flops'`` the FLOPs the step
    removes, measured exactly at the widths pruned so far (so it follows the pruning,
    as mmrazor's); ``'memory'`` the activation elements the channels occupy; ``None``
    the number of channels.  Fisher sums are kept in a buffer (a resumed run goes on
    with them); each backward's Fisher is summed over processes as it is added, so
    every process holds the run's Fisher and the checkpoint the main process writes
    alone is whole.  The Fisher is the model's loss's whatever the backward scales it
    by (mixed precision's loss scale, gradient accumulation's 1/n), and a step whose
    gate gradients are not finite (an overflowing AMP step) adds none.

    Args:
        architecture: the model to prune, or its config.
        pruner: an ``ImportancePruner`` or its config whose importance is
            ``dict(type='fisher', normalize_by=...)``; default
            ``dict(type='ImportancePruner', importance='fisher', flops=0.5)``.
        interval: training iterations between two pruning decisions.
        start: iterations of dense training before the Fisher is accumulated.
        input_shape: ``(C, H, W)`` of one image, for tracing and FLOPs counting.
        data_preprocessor: a preprocessor or its config; default the architecture's.
        init_cfg: mmengine initialisation config.

    Example:
        >>> model = GroupFisherAlgorithm(
        ...     architecture=dict(type='ImageClassifier',
        ...                       backbone=dict(type='PlainCNN', channels=(8, 16)),
        ...                       head=dict(type='LinearClsHead', num_classes=10)),
        ...     interval=5, input_shape=(3, 8, 8))
        >>> model.target, [f.shape[0] for f in model.fisher_sums()]
        (('flops', 0.5), [8, 16])
    """

    def __init__(self, architecture: ModuleOrCfg,
                 pruner: Union[ImportancePruner, dict, None] = None, interval: int = 10,
                 start: int = 0, input_shape: Sequence[int] = (3, 224, 224),
                 data_preprocessor: Optional[ModuleOrCfg] = None,
                 init_cfg: Optional[dict] = None):
        check_schedule_options('GroupFisherAlgorithm',
                               [('interval', interval, 1), ('start', start, 0)])
        if pruner is None:
            pruner = dict(type='ImportancePruner', importance='fisher', flops=0.5)
        super().__init__(architecture, pruner, input_shape, data_preprocessor, init_cfg)
        importance = self.pruner.importance
        if not isinstance(importance, FisherImportance):
            raise TypeError(f"GroupFisherAlgorithm accumulates Fisher information: the "
                            f"pruner's importance must be dict(type='fisher', ...), got "
                            f'{importance!r}')
        self.interval, self.start = int(interval), int(start)
        self.recorder = FisherRecorder(self.pruner, importance)
        widths = [g.num_channels for g in self.pruner.groups.prunable.values()]
        self.register_buffer('fisher', torch.zeros(sum(widths), dtype=torch.float64))
        # No group can lose a channel: stop trying (saved in checkpoints).
        self.register_buffer('stuck', torch.zeros((), dtype=torch.bool))
        self._memory: Optional[List[float]] = None
        prunable = list(self.pruner.groups.prunable)
        self.check_target([prunable[g] for g in self.recorder.scored])

    def check_target(self, groups: Optional[List[str]] = None) -> None:
        """Refuse a target the pruner's rules cannot meet by pruning the groups the
        Fisher cut reaches (checked once the recorder knows them)."""
        if hasattr(self, 'recorder'):
            super().check_target(groups)

    #: ``stuck`` came later: an older checkpoint loads as not stuck.
    OPTIONAL_STATE_PREFIXES = ('stuck', )

    @property
    def _stuck(self) -> bool:
        return bool(self.stuck)

    @_stuck.setter
    def _stuck(self, value: bool) -> None:
        self.stuck.fill_(bool(value))

    def min_prune_steps(self) -> int:
        """A lower bound on the pruning steps the target takes: each step removes at
        most the largest cut any group's rule allows, at its dense cost."""
        metric, target = self.target
        prunable = list(self.pruner.groups.prunable.values())
        full = {g.id: np.ones(g.num_channels, dtype=bool) for g in prunable}
        total = sum(g.num_channels for g in prunable)
        meter = SubnetMeter(self.pruner, self.example_inputs())
        dense = None if metric == 'ratio' else getattr(meter(full, metric == 'flops'), metric)
        largest = 0.0
        for g in self.recorder.scored:
            group = prunable[g]
            widths = np.append(np.sort(self.pruner.rule.allowed(group)), group.num_channels)
            widths = np.unique(widths)
            if widths.size < 2:
                continue
            cut = int(np.diff(widths).max())
            if metric == 'ratio':
                largest = max(largest, cut / total)
                continue
            width = int(widths[-2])
            keep = group.keep_best(np.arange(group.num_channels), width)
            removed = dense - getattr(meter({**full, group.id: keep}, metric == 'flops'),
                                      metric)
            per_channel = removed / (group.num_channels - width)
            largest = max(largest, per_channel * cut / max(dense, 1))
        if largest <= 0:
            return 0
        return max(int(np.ceil((1 - target) / largest - 1e-9)), 0)

    def schedule_overrun(self, max_iters: int) -> Optional[str]:
        """Why a run of ``max_iters`` training iterations ends before pruning can reach
        the target (None: it may not)."""
        steps = self.min_prune_steps()
        last = self.start + steps * self.interval
        if not steps or last < max_iters:
            return None
        metric, value = self.target
        return (f'{type(self).__name__}: {metric}={value:g} takes at least {steps} pruning '
                f'steps, the last at iteration {last} at the earliest (start={self.start}, '
                f'interval={self.interval}), but the run has {max_iters} iterations (0 to '
                f'{max_iters - 1}): the model at its end is not pruned to the target. Lower '
                'interval or start, or train longer (train_cfg max_epochs / max_iters); a '
                'resumed run goes on pruning.')

    def add_fisher(self, per_group: Dict[int, torch.Tensor]) -> None:
        """Add one backward's Fisher (per group index, as :meth:`FisherRecorder.fisher_of`
        gives it) to the ``fisher`` buffer, summed over processes.

        Summed as it comes, the buffer is the same on every process: the checkpoint only
        the main process writes holds every process's Fisher, and a resumed run decides
        as an uninterrupted one.  (Summed only before a decision, each process's buffer
        held its own share, and the checkpoint only the main process's.)  It runs inside
        the backward (see :meth:`FisherRecorder.gating`): every process runs the same
        backward, so every one reaches this all-reduce, at the same point among DDP's
        own gradient all-reduces.

        A backward whose Fisher is not finite on some process (an AMP step whose
        gradients overflowed, which the loss scaler skips too) adds nothing: one inf or
        NaN would make the interval's decision garbage."""
        backward = torch.zeros_like(self.fisher)
        views = self.per_group(backward)
        for g, fisher in per_group.items():
            views[g] += fisher.to(backward.device)
        all_reduce(backward, 'sum')
        if not torch.isfinite(backward).all():
            MMLogger.get_current_instance().warning(
                f'{type(self).__name__}: iteration {int(self.step_count) - 1}: the channel '
                "gates' gradients are not finite (an AMP step whose gradients overflowed, "
                'which the loss scaler skips too); its Fisher is not accumulated')
            return
        self.fisher += backward

    def fisher_sums(self) -> List[torch.Tensor]:
        """Views of the ``fisher`` buffer, one per prunable group (in the pruner's order)."""
        return self.per_group(self.fisher)

    def per_group(self, channels: torch.Tensor) -> List[torch.Tensor]:
        """Views of ``channels`` (one value per channel of every prunable group,
        concatenated), one per prunable group (in the pruner's order)."""
        widths = [g.num_channels for g in self.pruner.groups.prunable.values()]
        return list(channels.split(widths))

    @property
    def reached(self) -> bool:
        """Whether pruning has stopped: the subnet meets the target, or no group can
        lose another channel."""
        return self._stuck or float(self.kept_fraction) <= self.target[1] + 1e-12

    def loss(self, inputs: torch.Tensor, data_samples: Optional[list]) -> Dict[str, torch.Tensor]:
        """Prune when an interval ends, then the losses of a forward whose cut tensors
        are gated (its backward adds their Fisher to the buffer)."""
        if not self.training:
            return super().loss(inputs, data_samples)
        iteration = int(self.step_count)
        self.step_count += 1
        if iteration < self.start or self.reached:
            return super().loss(inputs, data_samples)
        if iteration > self.start and (iteration - self.start) % self.interval == 0:
            self.prune_step(inputs)
            if self.reached:
                self.log(f'iteration {iteration}: target {self.target[0]}='
                         f'{self.target[1]:g} reached; fine-tuning from here')
                return super().loss(inputs, data_samples)
        with self.recorder.gating(self.add_fisher) as watched:
            return watched(super().loss(inputs, data_samples))

    def prune_step(self, inputs: torch.Tensor) -> Optional[str]:
        """Prune the step whose accumulated Fisher per unit of cost is smallest, and
        start a new interval.  Returns the pruned group's id (None: nothing could be
        pruned)."""
        fisher = [f.cpu().numpy() for f in self.fisher_sums()]
        candidates = self.candidates(fisher, inputs)
        self.fisher.zero_()
        if not candidates:
            metric, target = self.target
            MMLogger.get_current_instance().warning(
                f'{type(self).__name__}: no group can lose another channel under '
                f'round_to/max_ratio; pruning stops short of the target {metric}='
                f'{target:g} at {float(self.kept_fraction):.4f} of the dense model')
            self._stuck = True
            return None
        value, gid, keep = min(candidates, key=lambda c: c[0])
        self.set_subnet({**self.current_subnet, gid: torch.from_numpy(keep)})
        self.sync_subnet()
        self.kept_fraction.fill_(self.measure())
        kept = int(keep.sum())
        self.log(f'iteration {int(self.step_count) - 1}: {gid} down to {kept}/{keep.size} '
                 f'channels (Fisher/cost {value:.3g}); {self.target[0]} '
                 f'{float(self.kept_fraction):.3f} of the dense model')
        return gid

    def candidates(self, fisher: List[np.ndarray],
                   inputs: torch.Tensor) -> List[Tuple[float, str, np.ndarray]]:
        """``(Fisher per unit of cost, group id, keep-mask)`` of each group's next step:
        its lowest-Fisher live channels down to the next width its rule allows."""
        alive = self.alive()
        prunable = list(self.pruner.groups.prunable.values())
        normalize_by = self.pruner.importance.normalize_by
        meter = SubnetMeter(self.pruner, self.example_inputs())
        current = meter(alive).flops if normalize_by == 'flops' else 0.0
        memory = self.memory_per_channel(inputs) if normalize_by == 'memory' else None
        found = []
        for g in self.recorder.scored:
            group = prunable[g]
            live = alive[group.id]
            allowed = self.pruner.rule.allowed(group)
            smaller = allowed[allowed < live.sum()]
            if not smaller.size:
                continue
            order = np.argsort(-np.where(live, fisher[g], -np.inf), kind='stable')
            keep = group.keep_best(order, int(smaller[-1]))
            removed = live & ~keep
            if not removed.any():
                continue
            if normalize_by == 'flops':
                cost = current - meter({**alive, group.id: keep}).flops
            elif normalize_by == 'memory':
                cost = memory[g] * removed.sum()
            else:
                cost = removed.sum()
            found.append((float(fisher[g][removed].sum()) / max(float(cost), 1e-12),
                          group.id, keep))
        return found

    def memory_per_channel(self, inputs: torch.Tensor) -> List[float]:
        """Activation elements (per sample) one channel of each group occupies, measured
        once on a training batch (pruning does not change them)."""
        if self._memory is None:
            ctx = ImportanceContext.from_pruner(self.pruner, data=[(inputs[:1], None)])
            self._memory = self.pruner.importance._cost(ctx)
        return self._memory
