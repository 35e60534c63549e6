"""Train / eval modes set for a while and given back module by module.

``model.train(flag)`` sets every submodule, so putting a model's mode back with it after
an ``eval()`` loses what was set module by module: a training model with frozen
BatchNorm (``model.train(); model.bn.eval()``) came back with its BatchNorm training,
its running statistics then moving at the next forward.  These context managers save
each module's flag and restore it.
"""
from contextlib import contextmanager
from typing import Iterator

import torch.nn as nn

__all__ = ['evaluating', 'kept_modes']


@contextmanager
def kept_modes(model: nn.Module) -> Iterator[nn.Module]:
    """Whatever the block does to the modes of ``model``'s modules, each gets its own back.

    Example:
        >>> net = nn.Sequential(nn.Conv2d(3, 4, 1), nn.BatchNorm2d(4)).train()
        >>> _ = net[1].eval()  # frozen statistics
        >>> with kept_modes(net):
        ...     _ = net.train()
        >>> net.training, net[1].training
        (True, False)
    """
    saved = [(module, module.training) for module in model.modules()]
    try:
        yield model
    finally:
        for module, training in saved:
            module.training = training


@contextmanager
def evaluating(model: nn.Module) -> Iterator[nn.Module]:
    """``model`` in eval mode for the block, each module's mode restored afterwards.

    Example:
        >>> net = nn.Sequential(nn.Conv2d(3, 4, 1), nn.BatchNorm2d(4), nn.Dropout()).train()
        >>> _ = net[1].eval()
        >>> with evaluating(net):
        ...     [m.training for m in net]
        [False, False, False]
        >>> [m.training for m in net]
        [True, False, True]
    """
    with kept_modes(model):
        model.eval()
        yield model
