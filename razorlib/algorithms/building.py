"""What every algorithm does first: build its architecture from a config and take the
architecture's data preprocessor unless the algorithm's config gives one."""
from typing import Optional, Union

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
