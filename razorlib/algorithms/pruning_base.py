"""PruningAlgorithm: an architecture, a prepared importance pruner and the subnet it has
pruned so far, trained by mmengine's Runner.

The base of the pruning algorithms that decide what to cut while training
(:class:`~razorlib.algorithms.ItePruneAlgorithm`, :class:`~razorlib.algorithms.
GroupFisherAlgorithm`, :class:`~razorlib.algorithms.SlimmingAlgorithm`).  Pruned
channels are masked, not sliced, so training goes on at the pruned widths; at the end
:meth:`PruningAlgorithm.slim_architecture` slices a copy and ``SlimExportHook`` writes it
with its channel config.
"""
import copy
import dataclasses
import math
import numbers
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
import torch.nn as nn
from mmengine.dist import broadcast
from mmengine.logging import MMLogger
from mmengine.model import BaseModel

from ..engine.optional_state import keep_own_optional_state
from ..pruning import ChannelConfig, ImportancePruner, allocate
from ..pruning.allocation import Allocation, SubnetMeter, budget_of
from ..pruning.structure import SubnetDict
from ..registry import PRUNERS, SCOPE
from ..utils import Complexity, get_model_complexity
from ..utils.inputs import random_batch
from .building import ModuleOrCfg, build_architecture, preprocessor_of

Batch = Tuple[torch.Tensor, torch.Tensor]


def check_schedule_options(algorithm: str, options: Sequence[Tuple[str, Any, int]]) -> None:
    """Refuse a schedule option (``(name, value, least)``) that is no whole number of at
    least ``least``, naming ``algorithm`` and the option: None or a string would fail
    inside ``int()`` naming nothing, NaN or infinity with a bare conversion error, and True
    would pass for 1.

    Example:
        >>> check_schedule_options('GroupFisherAlgorithm', [('interval', None, 1)])
        Traceback (most recent call last):
        ValueError: GroupFisherAlgorithm: interval must be an integer >= 1, got None
    """
    for name, value, least in options:
        if isinstance(value, bool) or not isinstance(value, numbers.Real) \
                or not math.isfinite(value) or int(value) != value or value < least:
            raise ValueError(f'{algorithm}: {name} must be an integer >= {least}, got '
                             f'{value!r}')


def labels_of(data_samples: Optional[Sequence[Any]], where: str) -> torch.Tensor:
    """The ``gt_label`` of every data sample, as one tensor of class indices."""
    if not data_samples or getattr(data_samples[0], 'gt_label', None) is None:
        raise ValueError(f'{where} scores channels from data: the batch needs data samples '
                         'with gt_label')
    return torch.cat([sample.gt_label for sample in data_samples])


class PruningAlgorithm(BaseModel):
    """An architecture masked by an :class:`~razorlib.pruning.ImportancePruner`, with
    the subnet pruned so far.

    The pruner holds the final budget (``ratio``, ``flops`` or ``params``) and how it is
    met (``importance``, ``global_ranking``, ``round_to``, ``max_ratio``), with the same
    options as :func:`razorlib.prune`.  Subclasses decide when to prune, in
    :meth:`loss` (the forward of ``mode='loss'``, so that mmengine's DDP wrapper runs
    them unchanged).  The kept channels are a buffer: a checkpoint restores them, and a
    decision taken on one process is broadcast to the others.

    Args:
        architecture: the model to prune, or its config: an mmengine model whose
            ``forward`` has the modes ``'tensor'`` (logits), ``'loss'`` and ``'predict'``.
        pruner: an ``ImportancePruner`` or its config (registered in ``PRUNERS``).
        input_shape: ``(C, H, W)`` of one image: tracing and FLOPs counting run a
            random ``1 x input_shape`` batch (:meth:`example_inputs`).
        data_preprocessor: a preprocessor or its config; default the architecture's.
        init_cfg: mmengine initialisation config.
    """

    def __init__(self, architecture: ModuleOrCfg,
                 pruner: Union[ImportancePruner, dict, None] = None,
                 input_shape: Sequence[int] = (3, 224, 224),
                 data_preprocessor: Optional[ModuleOrCfg] = None,
                 init_cfg: Optional[dict] = None):
        architecture = build_architecture(architecture)
        super().__init__(data_preprocessor=preprocessor_of(architecture, data_preprocessor),
                         init_cfg=init_cfg)
        self.architecture = architecture
        self.input_shape = tuple(input_shape)
        pruner = dict(type='ImportancePruner') if pruner is None else pruner
        # Pruners only exist in razorlib: look them up there whatever the default scope.
        self.pruner = PRUNERS.build({'_scope_': SCOPE, **pruner}) \
            if isinstance(pruner, dict) else pruner
        if not isinstance(self.pruner, ImportancePruner):
            raise TypeError(f'{type(self).__name__} ranks channels by an importance '
                            f'criterion: pruner must be an ImportancePruner, got '
                            f'{type(self.pruner).__name__}')
        self.pruner.prepare_from_supernet(self.architecture, self.example_inputs())
        by_cost = self.pruner.flops is not None or self.pruner.params is not None
        if not by_cost and len(self.pruner.ratios) != 1:
            raise ValueError(f'{type(self).__name__} prunes to one target: give the pruner '
                             f'one ratio, flops= or params=, not ratios {self.pruner.ratios}')
        #: the final budget: ('ratio' | 'flops' | 'params', fraction of the dense model)
        self.target = budget_of(ratio=None if by_cost else self.pruner.ratios[0],
                                flops=self.pruner.flops, params=self.pruner.params)
        widths = [g.num_channels for g in self.pruner.groups.prunable.values()]
        # Kept channels of every prunable group, concatenated: saved in checkpoints.
        self.register_buffer('kept_channels', torch.ones(sum(widths), dtype=torch.bool))
        # Training iterations taken (resumed with the checkpoint).
        self.register_buffer('step_count', torch.zeros((), dtype=torch.long))
        # The current subnet's budget metric over the dense model's (1: not pruned).
        self.register_buffer('kept_fraction', torch.ones((), dtype=torch.float64))
        self.register_load_state_dict_post_hook(_restore_subnet)
        self.register_load_state_dict_post_hook(_remeasure_subnet)
        self._dense: Optional[Complexity] = None
        self.check_target()

    #: Prefixes of the buffers added after checkpoints were first written: ``check_fits``
    #: lets an older checkpoint lack them, and loading one keeps this model's values (as
    #: built).
    OPTIONAL_STATE_PREFIXES: Tuple[str, ...] = ()

    def _load_from_state_dict(self, state_dict, prefix, *args) -> None:
        keep_own_optional_state(self, state_dict, prefix)
        super()._load_from_state_dict(state_dict, prefix, *args)

    def check_target(self, groups: Optional[List[str]] = None) -> None:
        """Refuse, before training, a target the pruner's rules cannot meet: the check of
        :func:`~razorlib.pruning.allocate` on the dense model, with the pruner's options.

        Args:
            groups: the ids of the groups the algorithm prunes; default every prunable
                group.

        Raises:
            ValueError: the target cannot be met (the message names the smallest value
                the rules allow).
        """
        metric, value = self.target
        prunable = self.pruner.groups.prunable
        ids = list(prunable) if groups is None else groups
        rule = self.pruner.rule
        allocate(self.pruner, {gid: np.zeros(prunable[gid].num_channels) for gid in ids},
                 **{metric: value}, global_ranking=self.pruner.global_ranking,
                 round_to=rule.round_to, max_ratio=rule.max_ratio,
                 example_inputs=self.example_inputs())

    # ------------------------------------------------------------------ schedule
    @property
    def target_met(self) -> bool:
        """Whether the subnet meets the pruner's target."""
        return float(self.kept_fraction) <= self.target[1] + 1e-9

    def schedule_overrun(self, max_iters: int) -> Optional[str]:
        """Why a run of ``max_iters`` training iterations ends before the pruning
        schedule does (None: it does not, or the algorithm cannot tell)."""
        return None

    # ------------------------------------------------------------------ subnets
    def example_inputs(self) -> torch.Tensor:
        """A random ``1 x input_shape`` batch on the model's device, the same at every
        call: drawn from a generator of its own, so that tracing, FLOPs counting and
        pruning steps leave the global RNGs (augmentation, dropout) as they were."""
        return random_batch(self.architecture, self.input_shape)

    @property
    def current_subnet(self) -> SubnetDict:
        """The kept channels per prunable group id."""
        return self.pruner.current_subnet

    def set_subnet(self, subnet: Dict[str, Any]) -> None:
        """Mask the architecture to ``subnet`` (keep-masks per group id; groups not
        named keep every channel) and record it for checkpoints."""
        self.pruner.set_subnet(subnet)
        keep = self.pruner.current_subnet
        self.kept_channels.copy_(torch.cat([keep[gid] for gid in self.pruner.groups.prunable]))

    def alive(self) -> Dict[str, np.ndarray]:
        """Per group id, the channels not pruned yet."""
        return {gid: keep.numpy() for gid, keep in self.current_subnet.items()}

    def export_subnet(self) -> ChannelConfig:
        """The pruned subnet as a channel config (what ``sub_model`` deploys)."""
        return self.pruner.export_subnet()

    def flops_params(self) -> Complexity:
        """FLOPs and parameters of the pruned subnet on one ``input_shape`` image."""
        return get_model_complexity(self.architecture, self.example_inputs(),
                                    layer_kinds=self.pruner.kinds)

    def slim_architecture(self) -> nn.Module:
        """A copy of the architecture sliced to the pruned subnet: its ``state_dict``
        loads into ``sub_model(architecture, channel_cfg)`` built from the channel config
        of :meth:`export_subnet`."""
        return self.pruner.deploy_subnet(copy.deepcopy(self.architecture),
                                         self.export_subnet())

    # ------------------------------------------------------------------ pruning
    def prune_to(self, fraction: float, scores: Dict[str, np.ndarray]) -> Allocation:
        """Prune to ``fraction`` of the dense model in the target's metric (a ratio of
        channels, or of FLOPs or params), ranked by ``scores``.

        Channels pruned before are ranked last and stay pruned: a group the allocation
        would give back a pruned channel (a global ranking with ``round_to`` may widen
        one group while it cuts another deeper) keeps the channels it has left, so the
        step lands at or under its budget.  The decision is taken on the main process and
        broadcast, so every process of a distributed run masks alike.
        """
        metric, _ = self.target
        alive = self.alive()
        ranked = {gid: np.where(alive[gid], s, -np.inf) for gid, s in scores.items()}
        rule = self.pruner.rule
        allocation = allocate(self.pruner, ranked, **{metric: fraction},
                              global_ranking=self.pruner.global_ranking,
                              round_to=rule.round_to, max_ratio=rule.max_ratio,
                              example_inputs=self.example_inputs())
        revived = [gid for gid, keep in allocation.subnet.items()
                   if gid in alive and (torch.as_tensor(keep).numpy() & ~alive[gid]).any()]
        if revived:
            subnet = {**allocation.subnet,
                      **{gid: torch.from_numpy(alive[gid].copy()) for gid in revived}}
            allocation = dataclasses.replace(
                allocation, subnet=subnet,
                kept={gid: (int(torch.as_tensor(keep).sum()), len(keep))
                      for gid, keep in subnet.items()})
        self.set_subnet(allocation.subnet)
        self.sync_subnet()
        self.kept_fraction.fill_(self.measure())
        if revived and allocation.pruned is not None:  # what the kept subnet costs
            allocation = dataclasses.replace(allocation, pruned=self.flops_params())
        return allocation

    def sync_subnet(self) -> None:
        """Take the main process's subnet on every process (a no-op without one)."""
        flags = self.kept_channels.to(torch.uint8)
        broadcast(flags, 0)
        self.kept_channels.copy_(flags.bool())
        _restore_subnet(self, None)

    def measure(self) -> float:
        """The current subnet's target metric over the dense model's."""
        metric, _ = self.target
        if metric == 'ratio':
            return float(self.kept_channels.float().mean())
        meter = SubnetMeter(self.pruner, self.example_inputs())
        if self._dense is None:  # the same for the whole run: counted once
            full = {gid: np.ones(g.num_channels, dtype=bool)
                    for gid, g in self.pruner.groups.prunable.items()}
            self._dense = meter(full, metric == 'flops')
        pruned = meter(self.alive(), metric == 'flops')
        return getattr(pruned, metric) / max(getattr(self._dense, metric), 1)

    def remeasure(self) -> bool:
        """Set ``kept_fraction`` to the subnet's fraction in this model's target metric,
        after a checkpoint restored the subnet; whether the checkpoint said otherwise.

        The checkpoint's value is in the metric of the run that wrote it: resumed or
        tested with another target metric (``ratio=`` on a ``flops=`` run) or
        ``input_shape``, it would say a subnet that keeps 0.57 of the channels keeps 0.36
        of them, and a ``ratio=0.5`` target would count as reached."""
        stored, measured = float(self.kept_fraction), self.measure()
        self.kept_fraction.fill_(measured)
        changed = abs(stored - measured) > 1e-9
        if changed:
            metric, value = self.target
            MMLogger.get_current_instance().warning(
                f'{type(self).__name__}: the checkpoint says the subnet keeps {stored:.4f} of '
                f"the dense model, but it keeps {measured:.4f} of its {metric} (the target "
                f"{metric}={value:g}): pruned to another target metric or input_shape? The "
                'kept fraction is re-measured; the run goes on from it.')
        return changed

    def score(self, batch: Optional[Batch] = None) -> Dict[str, np.ndarray]:
        """The pruner's criterion on the current weights (and on ``batch``, an
        ``(inputs, labels)`` pair, for a criterion computed from data)."""
        if self.pruner.importance.needs_data:
            if batch is None:
                raise ValueError(f'{self.pruner.importance!r} is computed from data; '
                                 f'{type(self).__name__} scores it on the training batch')
            return self.pruner.score(data=[batch])
        return self.pruner.score()

    def log(self, message: str) -> None:
        """Log a pruning decision in the run's log, prefixed with the algorithm."""
        MMLogger.get_current_instance().info(f'{type(self).__name__}: {message}')

    # ------------------------------------------------------------------ forward
    def forward(self, inputs: torch.Tensor, data_samples: Optional[list] = None,
                mode: str = 'tensor') -> Any:
        """The architecture's forward on the pruned subnet; ``'loss'`` is :meth:`loss`."""
        if mode == 'loss':
            return self.loss(inputs, data_samples)
        return self.architecture(inputs, data_samples, mode)

    def loss(self, inputs: torch.Tensor, data_samples: Optional[list]) -> Dict[str, torch.Tensor]:
        """The architecture's losses, with ``kept_fraction`` (logged, not summed)."""
        losses = dict(self.architecture(inputs, data_samples, 'loss'))
        losses['kept_fraction'] = self.kept_fraction.float()
        return losses


def _restore_subnet(algorithm: PruningAlgorithm, incompatible_keys: Any) -> None:
    """Set the pruner's subnet from the ``kept_channels`` buffer (after a checkpoint or a
    broadcast wrote it)."""
    flags = algorithm.kept_channels.cpu().numpy()
    subnet, start = {}, 0
    for gid, group in algorithm.pruner.groups.prunable.items():
        subnet[gid] = torch.from_numpy(flags[start:start + group.num_channels].copy())
        start += group.num_channels
    algorithm.pruner.set_subnet(subnet)


def _remeasure_subnet(algorithm: PruningAlgorithm, incompatible_keys: Any) -> None:
    """After a checkpoint loaded: ``kept_fraction`` in this model's target metric."""
    algorithm.remeasure()
