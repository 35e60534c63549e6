"""AutoSlim: train a slimmable supernet with the sandwich rule and in-place distillation.

Yu and Huang, "AutoSlim: Towards One-Shot Architecture Search for Channel Numbers", 2019.
"""
import random
from contextlib import contextmanager, nullcontext
from functools import partial
from pathlib import Path
from typing import Any, Callable, ContextManager, Dict, Iterator, List, Optional, Sequence, \
    Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmengine.logging import MessageHub
from mmengine.model import BaseModel
from mmengine.optim import OptimWrapper

from ..pruning import ChannelConfig, StructurePruner
from ..pruning.structure import SubnetDict
from ..registry import MODELS, PRUNERS, SCOPE
from ..utils import Complexity, get_model_complexity, preserved_bn_stats
from ..utils.checks import integer_number
from ..utils.inputs import random_batch
from .building import ModuleOrCfg, build_architecture, preprocessor_of, refuse_accumulation


@contextmanager
def _recorded_outputs(module: nn.Module) -> Iterator[List[torch.Tensor]]:
    """Collect what ``module`` returns from each forward inside the block."""
    outputs: List[torch.Tensor] = []
    handle = module.register_forward_hook(lambda mod, args, out: outputs.append(out))
    try:
        yield outputs
    finally:
        handle.remove()


def _max_after_load(model: 'AutoSlim', incompatible_keys: Any) -> None:
    """After a checkpoint loads: the max subnet, as between steps.  The masks a
    checkpoint holds are whatever subnet was set when it was saved (one set from Python,
    a search's last candidate), not the supernet's; ``tools/test.py`` evaluates, and
    ``tools/prune.py`` counts as dense, the subnet that is set."""
    model.set_max_subnet()


@MODELS.register_module()
class AutoSlim(BaseModel):
    """A slimmable supernet: an architecture and a pruner that masks it to any width.

    Each :meth:`train_step` follows the sandwich rule: the max subnet learns from the
    labels (the architecture's own loss), the min subnet and ``num_random_samples``
    random subnets learn from the max subnet's detached logits (in-place distillation,
    :meth:`distill_loss`); gradients of all passes are accumulated and the optimizer
    steps once.  Only the max subnet updates batch-norm running statistics, so the
    supernet evaluates at full width as it is, and a smaller subnet needs its batch-norm
    statistics recalibrated before it is evaluated.  Random subnets are drawn from a
    generator seeded with the run's seed and the step count, so every process of a
    distributed run, and a resumed run, samples the same ones.

    Between steps, and after a checkpoint loads, the supernet is set to its max subnet;
    ``val_step``/``test_step`` evaluate whatever subnet is set.  Under DDP, wrap it with
    ``model_wrapper_cfg=dict(type='razorlib.AutoSlimDDP')``, whose ``train_step`` runs
    this sandwich with gradients synchronised once per step.

    Args:
        architecture: the supernet, or its config: an ``ImageClassifier``, or any
            mmengine model whose ``forward`` has the modes ``'tensor'`` (logits),
            ``'loss'`` and ``'predict'`` and whose ``head`` module returns the logits.
        pruner: a pruner or its config in ``PRUNERS``; default ``RatioPruner`` with
            AutoSlim's widths 2/12 ... 12/12.  It is prepared on the architecture here,
            so its masks are part of this model's ``state_dict``.
        num_random_samples: random subnets per step, besides the max and min ones.
        input_shape: ``(C, H, W)`` of one image; tracing and FLOPs counting run
            ``torch.randn(1, *input_shape)``.
        data_preprocessor: a preprocessor or its config; default the architecture's.
        init_cfg: mmengine initialisation config.

    Example:
        >>> model = AutoSlim(
        ...     architecture=dict(type='ImageClassifier',
        ...                       backbone=dict(type='PlainCNN', channels=(8, 16)),
        ...                       head=dict(type='LinearClsHead', num_classes=10)),
        ...     input_shape=(3, 8, 8))
        >>> model.set_min_subnet()
        >>> small = model.flops_params()
        >>> model.set_max_subnet()
        >>> small.flops < model.flops_params().flops
        True
    """

    def __init__(self, architecture: ModuleOrCfg,
                 pruner: Optional[Union[StructurePruner, dict]] = None,
                 num_random_samples: int = 2, input_shape: Sequence[int] = (3, 224, 224),
                 data_preprocessor: Optional[ModuleOrCfg] = None,
                 init_cfg: Optional[dict] = None):
        architecture = build_architecture(architecture)
        super().__init__(data_preprocessor=preprocessor_of(architecture, data_preprocessor),
                         init_cfg=init_cfg)
        if not isinstance(getattr(architecture, 'head', None), nn.Module):
            raise TypeError(f'AutoSlim distils from the logits of architecture.head, but a '
                            f'{type(architecture).__name__} has no head module')
        self.architecture = architecture
        # checked here: 2.0 would fail only in the first train_step, with range()'s message
        # naming no option, and True would pass for 1
        self.num_random_samples = integer_number(
            num_random_samples, 'AutoSlim: num_random_samples', 'random subnets per step',
            minimum=0)
        self.input_shape = tuple(input_shape)
        if pruner is None:
            pruner = dict(type='RatioPruner')
        # Pruners only exist in razorlib: look them up there whatever the default scope.
        self.pruner: StructurePruner = PRUNERS.build({'_scope_': SCOPE, **pruner}) \
            if isinstance(pruner, dict) else pruner
        self.pruner.prepare_from_supernet(self.architecture, self.example_inputs())
        # Train steps taken; with the run's seed it picks the random subnets, and being a
        # buffer it is saved in checkpoints, so a resumed run picks the same ones.
        self.register_buffer('step_count', torch.zeros((), dtype=torch.long))
        self._in_train_step = False
        self.register_load_state_dict_post_hook(_max_after_load)

    # ------------------------------------------------------------------ subnets
    def example_inputs(self) -> torch.Tensor:
        """A random ``1 x input_shape`` batch on the model's device, the same at every
        call, leaving the global RNGs alone (:func:`~razorlib.utils.inputs.random_batch`)."""
        return random_batch(self.architecture, self.input_shape)

    def set_subnet(self, subnet: Union[SubnetDict, ChannelConfig, str, Path]) -> None:
        """Mask the supernet to a subnet dict, or to a channel config (object or file)
        that one of its subnets exported."""
        if isinstance(subnet, (ChannelConfig, str, Path)):
            subnet = self.pruner.subnet_from_channel_config(subnet)
        self.pruner.set_subnet(subnet)

    def set_max_subnet(self) -> None:
        self.pruner.set_max_channel()

    def set_min_subnet(self) -> None:
        self.pruner.set_min_channel()

    def sample_subnet(self, rng: Optional[random.Random] = None) -> SubnetDict:
        """A random subnet dict (not set; pass it to :meth:`set_subnet`)."""
        return self.pruner.sample_subnet(rng)

    @property
    def current_subnet(self) -> SubnetDict:
        return self.pruner.current_subnet

    def export_subnet(self) -> ChannelConfig:
        """The current subnet as a channel config, which ``slim_model`` deploys."""
        return self.pruner.export_subnet()

    def flops_params(self) -> Complexity:
        """FLOPs and parameters of the current subnet on one ``input_shape`` image."""
        return get_model_complexity(self.architecture, self.example_inputs())

    def uniform_subnet(self, flops: float, steps: int = 30) -> SubnetDict:
        """The uniform-width subnet (one ratio for every space) whose FLOPs are closest
        to ``flops``: the baseline a searched subnet of that cost is compared with.

        The current subnet is left as it was.
        """
        previous = self.current_subnet

        def cost(ratio: float) -> float:
            self.set_subnet(self.pruner.subnet_at(ratio))
            return self.flops_params().flops

        low, high = min(self.pruner.ratios), 1.0
        try:
            for _ in range(steps):  # bisect the smallest ratio that reaches ``flops``
                middle = (low + high) / 2
                low, high = (middle, high) if cost(middle) < flops else (low, middle)
            best = min((low, high), key=lambda ratio: abs(cost(ratio) - flops))
        finally:
            self.set_subnet(previous)
        return self.pruner.subnet_at(best)

    # ------------------------------------------------------------------ training
    def forward(self, inputs: torch.Tensor, data_samples: Optional[list] = None,
                mode: str = 'tensor') -> Any:
        """The architecture's forward on the current subnet.

        ``'loss'`` is only computed inside :meth:`train_step`: a plain loss forward
        would train one subnet only.
        """
        if mode == 'loss' and not self._in_train_step:
            raise RuntimeError("AutoSlim computes its losses in train_step (the sandwich "
                               "rule); in distributed training set "
                               "model_wrapper_cfg=dict(type='razorlib.AutoSlimDDP')")
        return self.architecture(inputs, data_samples, mode)

    def distill_loss(self, student_logits: torch.Tensor,
                     teacher_logits: torch.Tensor) -> torch.Tensor:
        """KL(teacher || student) of the class distributions, averaged over the batch."""
        return F.kl_div(F.log_softmax(student_logits, dim=1),
                        F.log_softmax(teacher_logits, dim=1),
                        reduction='batchmean', log_target=True)

    def train_step(self, data: Union[dict, tuple, list],
                   optim_wrapper: OptimWrapper) -> Dict[str, torch.Tensor]:
        """One sandwich step; see :meth:`sandwich_step`."""
        return self.sandwich_step(data, optim_wrapper)

    def sandwich_step(self, data: Union[dict, tuple, list], optim_wrapper: OptimWrapper,
                      runner_model: Optional[nn.Module] = None) -> Dict[str, torch.Tensor]:
        """Max, min and random subnets on one batch; one optimizer step.

        Args:
            data: a batch from the dataloader.
            optim_wrapper: the optimizer wrapper; each pass calls its ``backward``,
                then it steps once and zeroes the gradients.
            runner_model: the module whose forward runs the passes: the DDP wrapper
                around this model (its forward prepares the gradient synchronisation,
                which only the last pass performs), or ``None`` for this model.

        Returns:
            ``loss_max``, ``loss_min``, ``loss_rand1`` ... (detached) and their sum
            ``loss``.
        """
        refuse_accumulation(optim_wrapper, type(self).__name__)
        runner_model = self if runner_model is None else runner_model
        data = self.data_preprocessor(data, True)
        inputs, data_samples = data['inputs'], data['data_samples']
        passes = self._sandwich_passes()
        log_vars: Dict[str, torch.Tensor] = {}
        teacher = None
        self._in_train_step = True
        try:
            for index, (name, activate) in enumerate(passes):
                activate()
                # Students leave the running statistics alone; they are restored after
                # the backward, which needs them unchanged.
                bn_stats = nullcontext() if teacher is None else \
                    preserved_bn_stats(self.architecture)
                with bn_stats, self._gradient_sync(runner_model, index == len(passes) - 1):
                    with optim_wrapper.optim_context(runner_model):
                        if teacher is None:
                            loss, teacher = self._label_loss(runner_model, inputs,
                                                             data_samples)
                        else:
                            loss = self.distill_loss(
                                runner_model(inputs, data_samples, mode='tensor'), teacher)
                    optim_wrapper.backward(loss)
                log_vars[f'loss_{name}'] = loss.detach()
        finally:
            self._in_train_step = False
            self.set_max_subnet()
        optim_wrapper.step()
        optim_wrapper.zero_grad()
        self.step_count += 1
        log_vars['loss'] = sum(log_vars.values())
        return log_vars

    def _sandwich_passes(self) -> List[Tuple[str, Callable[[], None]]]:
        """(name, setter) of the max, min and random subnets of this step."""
        seed = MessageHub.get_current_instance().get_info('seed') or 0
        rng = random.Random(f'autoslim/{seed}/{int(self.step_count)}')
        passes = [('max', self.set_max_subnet), ('min', self.set_min_subnet)]
        for index in range(self.num_random_samples):
            passes.append((f'rand{index + 1}', partial(self.set_subnet, self.sample_subnet(rng))))
        return passes

    @staticmethod
    def _gradient_sync(runner_model: nn.Module, sync: bool) -> ContextManager:
        """DDP's ``no_sync`` unless ``sync``: gradients accumulate locally until then."""
        no_sync = getattr(runner_model, 'no_sync', None)
        return nullcontext() if sync or no_sync is None else no_sync()

    def _label_loss(self, runner_model: nn.Module, inputs: torch.Tensor,
                    data_samples: Optional[list]) -> Tuple[torch.Tensor, torch.Tensor]:
        """The architecture's loss on the current subnet and its detached logits."""
        with _recorded_outputs(self.architecture.head) as outputs:
            losses = runner_model(inputs, data_samples, mode='loss')
        if not outputs:
            raise RuntimeError("the architecture's loss forward did not run its head, so "
                               'AutoSlim has no logits to distil from')
        loss, _ = self.parse_losses(losses)
        return loss, outputs[-1].detach()
