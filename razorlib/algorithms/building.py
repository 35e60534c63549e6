"""What every algorithm does first: build its architecture from a config, take the
architecture's data preprocessor unless the algorithm's config gives one, and find the
``Pretrained`` checkpoints a built module has yet to load."""
from typing import Any, List, Optional, Union

import torch.nn as nn
from mmengine.model import BaseModule
from mmengine.model.weight_init import PretrainedInit

from ..registry import MODELS

__all__ = ['ModuleOrCfg', 'build_architecture', 'pending_pretrained', 'preprocessor_of']

ModuleOrCfg = Union[nn.Module, dict]


def build_architecture(architecture: ModuleOrCfg) -> nn.Module:
    """``architecture``, built from ``MODELS`` if it is a config.

    Example:
        >>> build_architecture(dict(type='PlainCNN', num_classes=3)).__class__.__name__
        'PlainCNN'
    """
    return MODELS.build(architecture) if isinstance(architecture, dict) else architecture


def preprocessor_of(architecture: nn.Module,
                    data_preprocessor: Optional[ModuleOrCfg]) -> Optional[nn.Module]:
    """The algorithm's data preprocessor: ``data_preprocessor`` (built if a config), else
    the architecture's own, so the wrapped classifier's normalisation is kept.

    Example:
        >>> net = nn.Linear(2, 2)
        >>> net.data_preprocessor = nn.Identity()
        >>> preprocessor_of(net, None) is net.data_preprocessor
        True
        >>> type(preprocessor_of(net, dict(type='ClsDataPreprocessor'))).__name__
        'ClsDataPreprocessor'

    """
    if isinstance(data_preprocessor, dict):
        return MODELS.build(data_preprocessor)
    if data_preprocessor is None:
        return getattr(architecture, 'data_preprocessor', None)
    return data_preprocessor


def refuse_accumulation(optim_wrapper: Any, algorithm: str) -> None:
    """Refuse gradient accumulation (``optim_wrapper.accumulative_counts``): an algorithm
    that runs several passes per step and steps (or zeroes a group) itself would step on
    every batch, unscaled, or drop the gradients waiting to be accumulated.

    Example:
        >>> import torch
        >>> from mmengine.optim import OptimWrapper
        >>> sgd = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
        >>> refuse_accumulation(OptimWrapper(sgd, accumulative_counts=2), 'SPOS')
        ... # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ValueError: SPOS steps the optimizer itself ...: ...accumulative_counts must be 1, got 2
    """
    wrappers = (optim_wrapper.items() if hasattr(optim_wrapper, 'items')
                else [(None, optim_wrapper)])
    for key, wrapper in wrappers:
        counts = getattr(wrapper, '_accumulative_counts', 1)
        if counts != 1:
            where = 'optim_wrapper' if key is None else f'optim_wrapper.{key}'
            raise ValueError(f'{algorithm} steps the optimizer itself on every batch: '
                             f'{where}.accumulative_counts must be 1, got {counts}')


def pending_pretrained(model: nn.Module) -> List[str]:
    """The checkpoints of the ``Pretrained`` init configs in ``model`` that its
    ``init_weights()`` has yet to load (none for a model that is no ``BaseModule``, which
    the runner does not initialise)."""
    if not isinstance(model, BaseModule) or model.is_init:
        return []
    return [str(cfg.get('checkpoint')) for module in model.modules()
            if isinstance(module, BaseModule) for cfg in _init_cfgs(module)
            if cfg.get('type') in ('Pretrained', PretrainedInit)]


def _init_cfgs(module: BaseModule) -> List[dict]:
    """``module.init_cfg`` as a list (mmengine takes a dict, a list of them or None)."""
    init_cfg = module.init_cfg
    return list(init_cfg) if isinstance(init_cfg, list) else [init_cfg] if init_cfg else []
