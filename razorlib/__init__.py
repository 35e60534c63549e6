"""razorlib: structured pruning, NAS and deployment quantization for PyTorch.

Example:
    >>> import torch, razorlib
    >>> net = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3), torch.nn.ReLU(),
    ...                           torch.nn.Conv2d(16, 4, 3))
    >>> slim = razorlib.prune(net, torch.randn(1, 3, 16, 16), ratio=0.5)
    >>> slim[0].out_channels
    8
"""
from .pruning.api import prune
from .version import __version__

__all__ = ['__version__', 'prune']
