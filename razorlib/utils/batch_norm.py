"""Keep batch-norm running statistics from changing while a model trains."""
from contextlib import contextmanager
from typing import Iterator

import torch
import torch.nn as nn


@contextmanager
def preserved_bn_stats(model: nn.Module) -> Iterator[None]:
    """Restore every batch norm's running mean, variance and batch count on exit.

    Forwards inside still normalise with the batch statistics (in train mode); only the
    running estimates that evaluation uses are put back.  Put the backward pass inside
    the block too: batch norm's backward checks that they did not change since the
    forward.

    Args:
        model: the model whose ``_BatchNorm`` layers are protected.

    Example:
        >>> bn = nn.BatchNorm1d(2)
        >>> with preserved_bn_stats(bn):
        ...     _ = bn(torch.randn(8, 2) + 5)
        >>> bn.running_mean.tolist()
        [0.0, 0.0]
    """
    saved = [(bn, {name: buf.clone() for name, buf in bn.named_buffers(recurse=False)
                   if name in ('running_mean', 'running_var', 'num_batches_tracked')})
             for bn in model.modules() if isinstance(bn, nn.modules.batchnorm._BatchNorm)]
    try:
        yield
    finally:
        with torch.no_grad():
            for bn, buffers in saved:
                for name, value in buffers.items():
                    getattr(bn, name).copy_(value)
