"""SPOS: train a one-shot supernet by single paths sampled uniformly (or fairly).

Guo et al., "Single Path One-Shot Neural Architecture Search with Uniform Sampling",
2020; the fair option is FairNAS's strict fairness (Chu et al., 2021).
"""
import random
from contextlib import nullcontext
from pathlib import Path
from typing import (Any, ContextManager, Dict, List, Mapping, Optional, Sequence, Tuple,
                    Union)

import torch
import torch.nn as nn
from mmengine.logging import MessageHub
from mmengine.model import BaseModel, MMDistributedDataParallel
from mmengine.optim import OptimWrapper

from ..engine.optional_state import keep_own_optional_state
from ..nas import FixedSubnet, NasMutator, fix_subnet
from ..nas.mutables import Choice
from ..registry import MODEL_WRAPPERS, MODELS
from ..utils import Complexity, get_model_complexity
from ..utils.checks import switch
from ..utils.inputs import random_batch
from .building import ModuleOrCfg, build_architecture, preprocessor_of, refuse_accumulation

SubnetLike = Union[FixedSubnet, Mapping[str, Choice], str, Path]


class OneShotSupernet(BaseModel):
    """What SPOS and DARTS share: an architecture with mutables, its search space, and
    the subnet interface the search loops use (``set_subnet``, ``export_subnet``,
    ``flops_params``).

    ``search_refusal`` is why the search loops refuse to search the supernet
    (``BaseSearchLoop.check_model``), or None where they may; ``subnet_refusal`` why
    its ``set_subnet`` and ``SubnetValLoop(subnet=...)`` refuse a subnet (its forward
    would ignore it), or None where they take one.

    Args:
        architecture: the supernet, or its config: an mmengine model whose ``forward``
            has the modes ``'tensor'``, ``'loss'`` and ``'predict'``, with mutables in it.
        input_shape: ``(C, H, W)`` of one image, for FLOPs counting.
        data_preprocessor: a preprocessor or its config; default the architecture's.
        init_cfg: mmengine initialisation config.
    """
    search_refusal: Optional[str] = None
    subnet_refusal: Optional[str] = None

    def __init__(self, architecture: ModuleOrCfg, input_shape: Sequence[int] = (3, 224, 224),
                 data_preprocessor: Optional[ModuleOrCfg] = None,
                 init_cfg: Optional[dict] = None):
        architecture = build_architecture(architecture)
        super().__init__(data_preprocessor=preprocessor_of(architecture, data_preprocessor),
                         init_cfg=init_cfg)
        self.architecture = architecture
        self.input_shape = tuple(input_shape)
        self.mutator = NasMutator(architecture)  # points at the architecture's mutables
        if not self.mutator.mutables:
            raise ValueError(f'{type(self).__name__}: the architecture '
                             f'{type(architecture).__name__} has no mutable to search')

    @property
    def search_space(self) -> NasMutator:
        """The search space the search loops move in (``BaseSearchLoop.build_space`` takes
        it, so ``EvolutionSearchLoop`` searches op and value choices)."""
        return self.mutator

    def set_subnet(self, subnet: SubnetLike) -> None:
        """Make the supernet compute ``subnet``: a choice dict, a FixedSubnet or a file.

        Raises:
            ValueError: naming the file (or ``subnet``) and the key at fault.
        """
        if isinstance(subnet, (str, Path)):
            self.mutator.set(FixedSubnet.load(subnet).choices, str(subnet))
        else:
            self.mutator.set(subnet.choices if isinstance(subnet, FixedSubnet) else subnet)

    @property
    def current_subnet(self) -> Dict[str, Choice]:
        return self.mutator.current()

    def sample_subnet(self, rng: Optional[random.Random] = None) -> Dict[str, Choice]:
        """A uniformly random subnet (not set); ``rng`` default ``Random(0)``."""
        return self.mutator.sample(rng or random.Random(0))

    def export_subnet(self) -> FixedSubnet:
        """The current subnet's active choices, which ``dump`` writes as a subnet YAML."""
        return FixedSubnet(self.mutator.active(self.mutator.current()))

    def example_inputs(self) -> torch.Tensor:
        """A random ``1 x input_shape`` batch on the model's device, the same at every
        call, leaving the global RNGs alone (:func:`~razorlib.utils.inputs.random_batch`)."""
        return random_batch(self.architecture, self.input_shape)

    def flops_params(self) -> Complexity:
        """FLOPs and parameters of the current subnet, counted on its fixed network
        (so candidates that do not run and unused weight slices are not counted)."""
        fixed = fix_subnet(self.architecture, self.export_subnet())
        return get_model_complexity(fixed, self.example_inputs())

    def forward(self, inputs: torch.Tensor, data_samples: Optional[list] = None,
                mode: str = 'tensor') -> Any:
        """The architecture's forward on the current subnet."""
        return self.architecture(inputs, data_samples, mode)

    @staticmethod
    def _gradient_sync(runner_model: nn.Module, sync: bool) -> ContextManager:
        """DDP's ``no_sync`` unless ``sync``: gradients accumulate locally until then."""
        no_sync = getattr(runner_model, 'no_sync', None)
        return nullcontext() if sync or no_sync is None else no_sync()


@MODELS.register_module()
class SPOS(OneShotSupernet):
    """Single-path one-shot supernet training: each step trains one random subnet.

    Each :meth:`train_step` samples a subnet uniformly (every mutable independently),
    sets it, and takes one optimizer step on its loss; the candidates that did not run
    get no gradient and are not updated.  With ``fair_sampling`` (FairNAS) a step
    trains ``k`` subnets (``k`` the largest number of choices of any mutable) that
    together use every choice of every mutable once, accumulating their gradients
    before one optimizer step (a mutable nested in a candidate op trains only where its
    op is chosen).  Subnets are drawn from a generator seeded with the
    run's seed and the step count: every process of a distributed run samples the
    same ones, and a resumed run continues the sequence.

    Under DDP use ``model_wrapper_cfg=dict(type='razorlib.SPOSDDP')``: it runs this
    ``train_step`` with ``find_unused_parameters`` (a single path leaves the other
    candidates unused), synchronising gradients once per step.

    A checkpoint records the subnet set when it was saved (:meth:`get_extra_state`;
    after training, the last step's path), and loading it sets that subnet again: what
    ``tools/test.py`` evaluates on a supernet checkpoint.  A checkpoint written before
    subnets were recorded loads too, keeping the subnet the model had.  To evaluate
    another subnet, use ``SubnetValLoop(subnet=...)``.

    Args:
        architecture: the supernet or its config (e.g. an ``ImageClassifier`` with a
            ``SearchableShuffleNetV2`` backbone).
        fair_sampling: FairNAS's strict fairness instead of one uniform path per step;
            True or False only (``bool('no')`` would be True: a string from a config is
            refused, naming the key).
        input_shape: ``(C, H, W)`` of one image, for FLOPs counting.
        data_preprocessor: a preprocessor or its config; default the architecture's.
        init_cfg: mmengine initialisation config.

    Example:
        >>> model = SPOS(dict(type='ImageClassifier',
        ...     backbone=dict(type='SearchableShuffleNetV2', arch_setting=[(16, 2, 2)],
        ...                   stem_channels=8, stem='cifar', last_channels=None),
        ...     head=dict(type='LinearClsHead', num_classes=10)), input_shape=(3, 8, 8))
        >>> sorted(model.mutator.choices)
        ['backbone.stages.0.0', 'backbone.stages.0.1']
        >>> model.set_subnet({'backbone.stages.0.0': 'shuffle_7x7',
        ...                   'backbone.stages.0.1': 'shuffle_3x3'})
        >>> model.export_subnet().choices['backbone.stages.0.0']
        'shuffle_7x7'
    """

    #: The recorded subnet, which checkpoints written before it was recorded lack:
    #: ``check_fits`` lets them, and loading one keeps the model's subnet.
    OPTIONAL_STATE_PREFIXES: Tuple[str, ...] = ('_extra_state', )

    def __init__(self, architecture: ModuleOrCfg, fair_sampling: bool = False,
                 input_shape: Sequence[int] = (3, 224, 224),
                 data_preprocessor: Optional[ModuleOrCfg] = None,
                 init_cfg: Optional[dict] = None):
        fair_sampling = switch(fair_sampling, f'{type(self).__name__}: fair_sampling')
        super().__init__(architecture, input_shape, data_preprocessor, init_cfg)
        self.fair_sampling = fair_sampling
        # Train steps taken; with the run's seed it picks the subnets, and being a
        # buffer it is saved in checkpoints, so a resumed run picks the same ones.
        self.register_buffer('step_count', torch.zeros((), dtype=torch.long))

    def get_extra_state(self) -> torch.Tensor:
        """The current subnet, for checkpoints: each mutable's choice as its index in
        the mutable's own ``choices``, in :attr:`mutator` order.  A tensor, as the
        checkpoint checks read every entry's shape."""
        return torch.tensor([mutable.choices.index(mutable.current_choice)
                             for mutable in self.mutator.mutables.values()], dtype=torch.long)

    def set_extra_state(self, state: torch.Tensor) -> None:
        """Set the subnet a checkpoint recorded (:meth:`get_extra_state`).

        Raises:
            ValueError: the recorded subnet does not fit this supernet's mutables
                (a checkpoint of another search space).
        """
        indices = [int(index) for index in torch.as_tensor(state).flatten()]
        mutables = self.mutator.mutables
        if len(indices) != len(mutables) or not all(
                0 <= index < len(mutable.choices)
                for index, mutable in zip(indices, mutables.values())):
            sizes = [len(mutable.choices) for mutable in mutables.values()]
            raise ValueError(f'{type(self).__name__}: the checkpoint records the subnet '
                             f'{indices} (choice indices), which does not fit this '
                             f'supernet: {len(mutables)} mutables of {sizes} choices')
        self.mutator.set({key: mutable.choices[index]
                          for (key, mutable), index in zip(mutables.items(), indices)},
                         where='checkpoint subnet')

    def _load_from_state_dict(self, state_dict, prefix, *args) -> None:
        keep_own_optional_state(self, state_dict, prefix)
        super()._load_from_state_dict(state_dict, prefix, *args)

    def step_subnets(self) -> List[Dict[str, Choice]]:
        """The subnets this step trains: one uniform sample, or a fair set."""
        seed = MessageHub.get_current_instance().get_info('seed') or 0
        rng = random.Random(f'spos/{seed}/{int(self.step_count)}')
        return self.mutator.fair_samples(rng) if self.fair_sampling \
            else [self.mutator.sample(rng)]

    def train_step(self, data: Union[dict, tuple, list], optim_wrapper: OptimWrapper,
                   runner_model: Optional[nn.Module] = None) -> Dict[str, torch.Tensor]:
        """Train this step's subnet(s) on one batch; one optimizer step.

        Args:
            data: a batch from the dataloader.
            optim_wrapper: the optimizer wrapper.
            runner_model: the module whose forward computes the loss: the DDP wrapper
                around this model (gradients are synchronised in the last backward
                only), or None for this model.

        Returns:
            ``loss`` (the mean over this step's subnets, detached) and the losses the
            architecture reports for the last subnet.
        """
        refuse_accumulation(optim_wrapper, type(self).__name__)
        runner_model = self if runner_model is None else runner_model
        data = self.data_preprocessor(data, True)
        subnets = self.step_subnets()
        total, log_vars = 0.0, {}
        for index, subnet in enumerate(subnets):
            self.mutator.set(subnet)
            with self._gradient_sync(runner_model, index == len(subnets) - 1):
                with optim_wrapper.optim_context(runner_model):
                    losses = runner_model(data['inputs'], data['data_samples'], mode='loss')
                loss, log_vars = self.parse_losses(losses)
                optim_wrapper.backward(loss)
            total += float(loss.detach())
        optim_wrapper.step()
        optim_wrapper.zero_grad()
        self.step_count += 1
        log_vars['loss'] = torch.tensor(total / len(subnets))
        return log_vars


@MODEL_WRAPPERS.register_module()
class SPOSDDP(MMDistributedDataParallel):
    """``MMDistributedDataParallel`` for one-shot supernets (:class:`SPOS`, DARTS).

    Runs the model's own ``train_step`` (several passes, or two optimizers) through
    this wrapper's forward, and defaults ``find_unused_parameters`` to True: the
    candidates a single path does not run have no gradient in that step.

    Args:
        module: the SPOS or DARTS model.
        find_unused_parameters: DDP's option; keep it True for SPOS.
        **kwargs: other ``DistributedDataParallel`` arguments; on CPU (gloo) pass
            ``device_ids=None`` (``tools/train.py`` does).

    Example:
        >>> model_wrapper_cfg = dict(type='razorlib.SPOSDDP')  # in an SPOS config
    """

    def __init__(self, module: nn.Module, find_unused_parameters: bool = True, **kwargs):
        if not isinstance(module, OneShotSupernet):
            raise TypeError(f'SPOSDDP wraps a SPOS or DARTS model, got {type(module).__name__}')
        super().__init__(module=module, find_unused_parameters=find_unused_parameters,
                         **kwargs)

    def train_step(self, data: Union[dict, tuple, list],
                   optim_wrapper: OptimWrapper) -> Dict[str, torch.Tensor]:
        return self.module.train_step(data, optim_wrapper, runner_model=self)
