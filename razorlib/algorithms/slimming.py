"""SlimmingAlgorithm: network slimming: L1 on the batch-norm scales while training, then
prune by them (Liu et al., "Learning Efficient Convolutional Networks through Network
Slimming", ICCV 2017)."""
import math
from typing import Dict, List, Optional, Sequence, Union

import torch
import torch.nn as nn

from ..layers import NormKind
from ..pruning import ImportancePruner
from ..registry import MODELS
from ..utils.checks import real_number
from .ite_prune import ItePruneAlgorithm
from .pruning_base import ModuleOrCfg

#: The pruner network slimming uses unless told otherwise: one threshold on the raw
#: ``|gamma|`` of every group (global ranking, no per-group normalisation), no group
#: pruned by more than 90%.
DEFAULT_PRUNER = dict(type='ImportancePruner', flops=0.5, global_ranking=True, max_ratio=0.9,
                      importance=dict(type='bn_scale', normalize='none'))


@MODELS.register_module()
class SlimmingAlgorithm(ItePruneAlgorithm):
    """Network slimming in one run: ``prune_at`` iterations of sparsity training, with
    ``sparsity * sum(|gamma|)`` over the scales of the norms of every prunable group added
    to the loss (``loss_sparsity``), then one pruning step to the pruner's target by the
    pruner's criterion (BN scale), then fine-tuning without the penalty.

    The penalty's gradient is ``sparsity * sign(gamma)``: it drives the scales of
    unneeded channels to zero, where pruning them changes little.  ``prune_times > 1``
    prunes in several steps ``step_freq`` apart, as :class:`ItePruneAlgorithm`, the
    penalty lasting until the last.

    Args:
        architecture: the model to prune, or its config.
        pruner: an ``ImportancePruner`` or its config; default :data:`DEFAULT_PRUNER`
            (``flops=0.5``, BN scale ranked globally).
        sparsity: the weight of the L1 penalty (1e-4 in the paper for VGG on CIFAR).
        prune_at: the iteration of the (first) pruning step: the iterations of sparsity
            training.  Required, and > 0 with ``sparsity > 0``: pruning at iteration 0
            would rank the scales before the penalty has acted.  ``prune_at=0`` only with
            ``sparsity=0``, to prune a model already trained sparse by its scales.
        prune_times, step_freq: see :class:`ItePruneAlgorithm`.
        input_shape: ``(C, H, W)`` of one image, for tracing and FLOPs counting.
        data_preprocessor: a preprocessor or its config; default the architecture's.
        init_cfg: mmengine initialisation config.

    Example:
        >>> model = SlimmingAlgorithm(
        ...     architecture=dict(type='ImageClassifier',
        ...                       backbone=dict(type='PlainCNN', channels=(8, 16)),
        ...                       head=dict(type='LinearClsHead', num_classes=10)),
        ...     sparsity=1e-4, prune_at=100, input_shape=(3, 8, 8))
        >>> [name for name, _ in model.penalised()]
        ['backbone.stages.0.bn', 'backbone.stages.1.bn']
    """

    def __init__(self, architecture: ModuleOrCfg,
                 pruner: Union[ImportancePruner, dict, None] = None, sparsity: float = 1e-4,
                 prune_at: Optional[int] = None, prune_times: int = 1, step_freq: int = 1,
                 input_shape: Sequence[int] = (3, 224, 224),
                 data_preprocessor: Optional[ModuleOrCfg] = None,
                 init_cfg: Optional[dict] = None):
        sparsity = real_number(sparsity, 'SlimmingAlgorithm: sparsity',
                               'the weight of the L1 penalty')
        if not 0 <= sparsity < math.inf:
            raise ValueError(f'SlimmingAlgorithm: sparsity must be a finite number >= 0, '
                             f'got {sparsity!r}')
        if prune_at is None:
            raise ValueError('SlimmingAlgorithm needs prune_at: the iterations of sparsity '
                             'training before it prunes by the scales (e.g. 20 * '
                             'iters_per_epoch), or 0 with sparsity=0 for a model already '
                             'trained sparse')
        if sparsity > 0 and prune_at == 0:
            raise ValueError(f'SlimmingAlgorithm: sparsity={sparsity:g} with prune_at=0 prunes '
                             'at iteration 0, before the L1 penalty has trained a single '
                             'scale: the channels are ranked by their initial scales (all 1 '
                             'on a fresh model) and the penalty is never applied. Set '
                             'prune_at to the iterations of sparsity training (e.g. 20 * '
                             'iters_per_epoch), or sparsity=0 to prune at once by the scales '
                             'as they are (a model already trained sparse).')
        super().__init__(architecture, DEFAULT_PRUNER if pruner is None else pruner,
                         step_freq=step_freq, prune_times=prune_times, start=prune_at,
                         input_shape=input_shape, data_preprocessor=data_preprocessor,
                         init_cfg=init_cfg)
        self.sparsity = float(sparsity)
        if not self.penalised():
            raise ValueError('SlimmingAlgorithm penalises the scales of the norms of prunable '
                             'channel groups, but the architecture has none (no prunable '
                             'group holds an affine norm)')

    _start_option = 'prune_at'

    def penalised(self) -> List[tuple]:
        """``(name, norm)`` of the affine norms on prunable channels: whose ``weight``
        the penalty reads."""
        modules = dict(self.architecture.named_modules())
        names = sorted({name for group in self.pruner.groups.prunable.values()
                        for name in group.norms})
        # a PReLU's slopes follow its channels as a norm's scales do, but scale nothing
        return [(name, modules[name]) for name in names
                if isinstance(self.pruner.kinds.kind_of(modules[name]), NormKind)
                and isinstance(getattr(modules[name], 'weight', None), nn.Parameter)]

    def sparsity_loss(self) -> torch.Tensor:
        """``sparsity * sum(|gamma|)`` over :meth:`penalised`'s norms."""
        return self.sparsity * sum(norm.weight.abs().sum() for _, norm in self.penalised())

    def loss(self, inputs: torch.Tensor, data_samples: Optional[list]) -> Dict[str, torch.Tensor]:
        """The losses, with ``loss_sparsity`` (0 after the last pruning step)."""
        losses = super().loss(inputs, data_samples)
        if self.training and self.sparsity > 0:
            # after the last step the penalty is 0, logged so (not a stale value)
            losses['loss_sparsity'] = (self.kept_fraction.new_zeros((), dtype=torch.float32)
                                       if self.finished else self.sparsity_loss())
        return losses
