"""ArchWeightOptimWrapperConstructor: one optimizer for the weights, one for the
architecture parameters, as mmengine's ``OptimWrapperDict`` (DARTS)."""
from typing import Dict, List, Optional

import torch.nn as nn
from mmengine.model import is_model_wrapper
from mmengine.optim import OptimWrapperDict

from ..registry import OPTIM_WRAPPER_CONSTRUCTORS, OPTIM_WRAPPERS, OPTIMIZERS


@OPTIM_WRAPPER_CONSTRUCTORS.register_module()
class ArchWeightOptimWrapperConstructor:
    """Builds one optimizer wrapper per parameter group the model names.

    The model (DARTS) says which parameters form which group through
    ``parameter_groups() -> {name: [parameters]}``; the config gives each name its
    optimizer wrapper, and the result is an ``OptimWrapperDict`` with those keys::

        optim_wrapper = dict(
            constructor='ArchWeightOptimWrapperConstructor',
            architecture=dict(optimizer=dict(type='SGD', lr=0.025, momentum=0.9)),
            mutator=dict(optimizer=dict(type='Adam', lr=3e-4, betas=(0.5, 0.999))))

    Args:
        optim_wrapper_cfg: group name -> optimizer wrapper config (``type`` optional,
            default ``OptimWrapper``).
        paramwise_cfg: not supported (an error if given).

    Example:
        >>> import torch
        >>> class Model(nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.weight, self.alpha = nn.Linear(2, 2), nn.Parameter(torch.zeros(3))
        ...     def parameter_groups(self):
        ...         return dict(architecture=list(self.weight.parameters()), mutator=[self.alpha])
        >>> wrappers = ArchWeightOptimWrapperConstructor(dict(
        ...     architecture=dict(optimizer=dict(type='SGD', lr=0.1)),
        ...     mutator=dict(optimizer=dict(type='Adam', lr=0.01))))(Model())
        >>> sorted(wrappers.keys()), type(wrappers['mutator'].optimizer).__name__
        (['architecture', 'mutator'], 'Adam')
    """

    def __init__(self, optim_wrapper_cfg: dict, paramwise_cfg: Optional[dict] = None):
        if paramwise_cfg:
            raise ValueError('optim_wrapper.paramwise_cfg: ArchWeightOptimWrapperConstructor '
                             'does not support it; give each group its own optimizer settings')
        self.optim_wrapper_cfg = dict(optim_wrapper_cfg)

    def __call__(self, model: nn.Module) -> OptimWrapperDict:
        if is_model_wrapper(model):
            model = model.module
        if not hasattr(model, 'parameter_groups'):
            raise TypeError(f'ArchWeightOptimWrapperConstructor needs a model with '
                            f'parameter_groups() (DARTS), got {type(model).__name__}')
        groups: Dict[str, List[nn.Parameter]] = model.parameter_groups()
        if set(groups) != set(self.optim_wrapper_cfg):
            raise ValueError(f'optim_wrapper: {type(model).__name__} has the parameter '
                             f'groups {sorted(groups)}; the config names '
                             f'{sorted(self.optim_wrapper_cfg)}')
        wrappers = {}
        for name, cfg in self.optim_wrapper_cfg.items():
            cfg = dict(cfg)
            if 'optimizer' not in cfg:
                raise ValueError(f'optim_wrapper.{name}: no optimizer')
            optimizer = OPTIMIZERS.build(dict(cfg.pop('optimizer'), params=groups[name]))
            wrappers[name] = OPTIM_WRAPPERS.build(dict(cfg, type=cfg.get('type', 'OptimWrapper'),
                                                       optimizer=optimizer))
        return OptimWrapperDict(**wrappers)
