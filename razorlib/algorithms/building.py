"""What every algorithm does first: build its architecture from a config and take the
architecture's data preprocessor unless the algorithm's config gives one."""
from typing import Any, Optional, Union

import torch.nn as nn

from ..registry import MODELS

__all__ = ['ModuleOrCfg', 'build_architecture', 'preprocessor_of']

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
