"""DARTS: differentiable architecture search, first order (Liu et al., 2019)."""
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from mmengine.optim import OptimWrapper, OptimWrapperDict

from ..nas import DiffMutableOP, FixedSubnet
from ..registry import MODELS
from .building import refuse_accumulation
from .spos import ModuleOrCfg, OneShotSupernet, SubnetLike

#: The keys of DARTS's ``OptimWrapperDict``: the weights, the architecture parameters.
WEIGHTS, ARCH = 'architecture', 'mutator'


@MODELS.register_module()
class DARTS(OneShotSupernet):
    """A supernet of ``DiffMutableOP`` edges, trained with an architecture optimizer
    alternating with the weights' one (first-order DARTS).

    Each :meth:`train_step` takes two batches (a pair from the dataloader, or one
    batch split in halves): the architecture parameters step on the loss of the
    second, then the weights step on the loss of the first, each through its own
    wrapper of the ``OptimWrapperDict`` (``'mutator'`` and ``'architecture'``, built
    by ``ArchWeightOptimWrapperConstructor``).  Each step's gradients of the other
    group are dropped.  The derived subnet takes each edge's largest weight
    (:meth:`export_subnet`).  :meth:`set_subnet` is refused: the forward is the mixture
    whatever subnet is set; a subnet is evaluated as its fixed network
    (``razorlib.nas.fix_subnet(model.architecture, subnet)``).

    Under DDP use ``model_wrapper_cfg=dict(type='razorlib.SPOSDDP')``: its train step
    runs this one, and both backward passes are synchronised.

    Args:
        architecture: the supernet or its config, with ``DiffMutableOP`` mutables.
        input_shape: ``(C, H, W)`` of one image, for FLOPs counting.
        data_preprocessor: a preprocessor or its config; default the architecture's.
        init_cfg: mmengine initialisation config.

    Example:
        >>> model = DARTS(dict(type='ImageClassifier',
        ...     backbone=dict(type='SearchableShuffleNetV2', arch_setting=[(16, 1, 2)],
        ...                   stem_channels=8, stem='cifar', last_channels=None,
        ...                   mutable_cfg=dict(type='DiffMutableOP')),
        ...     head=dict(type='LinearClsHead', num_classes=10)), input_shape=(3, 8, 8))
        >>> [len(group) for group in model.parameter_groups().values()]
        [74, 1]
    """
    # A search loop would score the softmax mixture whatever subnet it set, and count
    # and write the argmax subnet (export_subnet) for every candidate.
    search_refusal = ('a DARTS subnet is derived by argmax of its architecture weights, not '
                      'searched: take DARTS.export_subnet() (DumpSubnetHook writes it as '
                      'subnet_final.yaml after training)')
    # Why set_subnet is refused (SubnetValLoop reads it too): the forward would ignore it.
    subnet_refusal = ('its forward is the softmax mixture of every candidate of every edge, '
                      'whatever subnet is set; to evaluate a subnet, build it as a plain '
                      'network with the supernet weights, razorlib.nas.fix_subnet('
                      'model.architecture, subnet), and validate that (DARTS.export_subnet() '
                      'is the derived argmax subnet)')

    def __init__(self, architecture: ModuleOrCfg, input_shape: Sequence[int] = (3, 224, 224),
                 data_preprocessor: Optional[ModuleOrCfg] = None,
                 init_cfg: Optional[dict] = None):
        super().__init__(architecture, input_shape, data_preprocessor, init_cfg)
        self.edges: Dict[str, DiffMutableOP] = {
            key: m for key, m in self.mutator.mutables.items() if isinstance(m, DiffMutableOP)}
        if not self.edges:
            raise ValueError('DARTS: the architecture has no DiffMutableOP; build its '
                             "mutable ops with mutable_cfg=dict(type='DiffMutableOP')")

    def parameter_groups(self) -> Dict[str, List[nn.Parameter]]:
        """``'architecture'``: the weights; ``'mutator'``: the edges' ``arch_param``."""
        arch = [edge.arch_param for edge in self.edges.values()]
        ids = {id(p) for p in arch}
        return {WEIGHTS: [p for p in self.parameters() if id(p) not in ids], ARCH: arch}

    def set_subnet(self, subnet: SubnetLike) -> None:
        """Refused: the forward computes the softmax mixture whatever choices are set,
        so a set subnet would change nothing that runs (see ``subnet_refusal``).

        Raises:
            ValueError: ``DARTS.set_subnet: <subnet_refusal>``.
        """
        raise ValueError(f'{type(self).__name__}.set_subnet: {self.subnet_refusal}')

    def export_subnet(self) -> FixedSubnet:
        """The derived subnet: each edge at its largest architecture weight."""
        for edge in self.edges.values():
            edge.current_choice = edge.argmax()
        return super().export_subnet()

    def arch_weights(self) -> Dict[str, Dict[str, float]]:
        """Edge name -> candidate -> softmax weight, for logs and reports."""
        return {key: edge.probabilities() for key, edge in self.edges.items()}

    @staticmethod
    def split_batches(data: Union[dict, tuple, list]) -> Tuple[dict, dict]:
        """(weights batch, architecture batch): a pair as given, or one batch's halves."""
        if isinstance(data, (tuple, list)):
            if len(data) != 2:
                raise ValueError(f'DARTS takes one batch or a pair of batches, got {len(data)}')
            return data[0], data[1]
        size = len(data['inputs'])
        if size < 2:
            raise ValueError('DARTS splits each batch in halves: use a batch size >= 2')
        half = size // 2
        return ({key: value[:half] for key, value in data.items()},
                {key: value[half:] for key, value in data.items()})

    def train_step(self, data: Union[dict, tuple, list], optim_wrapper: OptimWrapperDict,
                   runner_model: Optional[nn.Module] = None) -> Dict[str, torch.Tensor]:
        """One architecture step, then one weight step.

        Returns:
            ``loss_arch`` and ``loss`` (the weights' loss), detached.
        """
        if not isinstance(optim_wrapper, OptimWrapperDict) or \
                set(optim_wrapper.keys()) != {WEIGHTS, ARCH}:
            raise TypeError("DARTS trains with an OptimWrapperDict of 'architecture' and "
                            "'mutator': set optim_wrapper.constructor="
                            "'ArchWeightOptimWrapperConstructor'")
        refuse_accumulation(optim_wrapper, type(self).__name__)
        runner_model = self if runner_model is None else runner_model
        weight_data, arch_data = self.split_batches(data)
        arch_loss = self._step(runner_model, arch_data, optim_wrapper[ARCH])
        optim_wrapper[WEIGHTS].zero_grad()
        loss = self._step(runner_model, weight_data, optim_wrapper[WEIGHTS])
        optim_wrapper[ARCH].zero_grad()
        return dict(loss=loss, loss_arch=arch_loss)

    def _step(self, runner_model: nn.Module, data: dict, wrapper: OptimWrapper) -> torch.Tensor:
        data = self.data_preprocessor(data, True)
        with wrapper.optim_context(runner_model):
            losses = runner_model(data['inputs'], data['data_samples'], mode='loss')
        loss, _ = self.parse_losses(losses)
        wrapper.update_params(loss)
        return loss.detach()
