"""razorlib: structured pruning, NAS and deployment quantization for PyTorch.

Importing razorlib also lets ``torch.load(weights_only=True)`` (torch's default, which
mmengine 0.10.7's resume uses) read mmengine checkpoints: see
:mod:`razorlib.engine.checkpoint`.

Example:
    >>> import torch, razorlib
    >>> net = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3), torch.nn.ReLU(),
    ...                           torch.nn.Conv2d(16, 4, 3))
    >>> slim = razorlib.prune(net, torch.randn(1, 3, 16, 16), ratio=0.5)
    >>> slim[0].out_channels
    8
"""
from . import nn
from .engine.checkpoint import register_checkpoint_globals
from .pruning.api import prune
from .registry import register_all_modules
from .version import __version__

register_checkpoint_globals()

__all__ = ['__version__', 'nn', 'prune', 'register_all_modules', 'register_checkpoint_globals']
