"""Batch-norm running statistics: keep them while a model trains, re-estimate them after
pruning."""
from contextlib import contextmanager
from typing import Any, Iterable, Iterator, Optional

import torch
import torch.nn as nn

from ..tracing.forward import call_model


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


def reestimate_bn_stats(model: nn.Module, batches: Iterable[Any],
                        max_batches: Optional[int] = None) -> int:
    """Recompute every batch norm's running mean and variance from ``batches``.

    A pruned model's running statistics describe the dense model's activations, which
    slicing changed; until they are re-estimated the slim model can predict little
    better than chance.  The statistics are reset and averaged over the batches with
    equal weight (``momentum=None``); every other module stays in eval mode (no dropout)
    and the model's modes and the norms' momenta are put back.

    Args:
        model: the model whose ``_BatchNorm`` layers (with running statistics) are
            re-estimated.
        batches: model inputs: tensors, tuples of args or dicts of kwargs.
        max_batches: stop after this many batches.

    Returns:
        the number of batches run (0, and nothing changed, if the model has no such norm).

    Example:
        >>> bn = nn.BatchNorm1d(2)
        >>> reestimate_bn_stats(bn, [torch.tensor([[1., 4.], [3., 8.]])])
        1
        >>> bn.running_mean.tolist(), bn.training
        ([2.0, 6.0], True)
    """
    norms = [m for m in model.modules()
             if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats]
    if not norms:
        return 0
    modes = [(m, m.training) for m in model.modules()]
    momenta = [(bn, bn.momentum) for bn in norms]
    count = 0
    try:
        model.eval()
        for bn in norms:
            bn.reset_running_stats()
            bn.momentum = None
            bn.train()
        with torch.no_grad():
            for inputs in batches:
                if max_batches is not None and count >= max_batches:
                    break
                call_model(model, inputs)
                count += 1
    finally:
        for module, training in modes:
            module.training = training
        for bn, momentum in momenta:
            bn.momentum = momentum
    return count
