"""Batch-norm running statistics: keep them while a model trains, re-estimate them after
pruning."""
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

import torch
import torch.nn as nn

from ..tracing.forward import call_on_batch


_STATS = ('running_mean', 'running_var', 'num_batches_tracked')
Saved = List[Tuple[str, nn.Module, Dict[str, torch.Tensor]]]


def _saved_stats(model: nn.Module) -> Saved:
    """``(name, norm, copies of its running statistics)`` of every batch norm."""
    return [(name, bn, {key: buf.clone() for key, buf in bn.named_buffers(recurse=False)
                        if key in _STATS})
            for name, bn in model.named_modules()
            if isinstance(bn, nn.modules.batchnorm._BatchNorm)]


def _restore(saved: Saved) -> None:
    with torch.no_grad():
        for _, bn, buffers in saved:
            for key, value in buffers.items():
                getattr(bn, key).copy_(value)


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
    saved = _saved_stats(model)
    try:
        yield
    finally:
        _restore(saved)


def _sample_weighted() -> Callable[..., None]:
    """A norm's forward pre-hook that sets its momentum to ``n / (seen + n)`` before each
    call, ``n`` the elements per channel of its input, ``seen`` those of the calls before:
    its running statistics then average the calls' weighed by ``n``.  Calls of one size
    get ``1 / k`` on the k-th, exactly the ``1 / num_batches_tracked`` of
    ``momentum=None``.  A call without elements (an empty batch, which the norm does not
    average in) gets 0."""
    seen = 0

    def hook(bn: nn.Module, args: tuple, kwargs: dict) -> None:
        nonlocal seen
        n = (args or tuple(kwargs.values()))[0].numel() // bn.num_features
        seen += n
        bn.momentum = n / seen if n else 0.0

    return hook


def reestimate_bn_stats(model: nn.Module, batches: Iterable[Any],
                        max_batches: Optional[int] = None) -> int:
    """Recompute every batch norm's running mean and variance from ``batches``.

    A pruned model's running statistics describe the dense model's activations, which
    slicing changed; until they are re-estimated the slim model can predict little
    better than chance.  The statistics are reset and averaged over the batches, each
    batch's weighed by the elements per channel it gives the norm (its samples times
    their positions), so that every sample counts alike: a trailing partial batch (a
    ``DataLoader``'s ``drop_last=False``) counts as its samples do, not as a full batch,
    and batches of one size weigh alike (PyTorch's ``momentum=None`` average).  Every
    other module stays in eval mode (no dropout) and the model's modes and the norms'
    momenta are put back.

    Args:
        model: the model whose ``_BatchNorm`` layers (with running statistics) are
            re-estimated.
        batches: model inputs: tensors, tuples of args or dicts of kwargs.
        max_batches: stop after this many batches.

    Returns:
        the number of batches run (0, and nothing changed, if the model has no such norm).

    Raises:
        ValueError: ``batches`` is empty, the model fails on a batch (named), or the
            statistics came out NaN or infinite (the batches hold such values), naming
            the norms; the statistics are then left as they were.

    Example:
        >>> bn = nn.BatchNorm1d(2)
        >>> reestimate_bn_stats(bn, [torch.tensor([[1., 4.], [3., 8.]])])
        1
        >>> bn.running_mean.tolist(), bn.training
        ([2.0, 6.0], True)
        >>> reestimate_bn_stats(bn, [torch.tensor([[float('nan'), 4.], [1., 2.]])])
        Traceback (most recent call last):
        ...
        ValueError: re-estimating batch norms gave NaN or infinite running statistics in ...
        >>> bn.running_mean.tolist()
        [2.0, 6.0]
    """
    saved = [entry for entry in _saved_stats(model) if entry[1].track_running_stats]
    if not saved:
        return 0
    modes = [(m, m.training) for m in model.modules()]
    momenta = [(bn, bn.momentum) for _, bn, _ in saved]
    hooks = [bn.register_forward_pre_hook(_sample_weighted(), with_kwargs=True)
             for _, bn, _ in saved]
    count = 0
    try:
        model.eval()
        for _, bn, _ in saved:
            bn.reset_running_stats()
            bn.train()
        with torch.no_grad():
            for inputs in batches:
                if max_batches is not None and count >= max_batches:
                    break
                call_on_batch(model, inputs, 're-estimating batch norms', count)
                count += 1
    except BaseException:
        _restore(saved)
        raise
    finally:
        for hook in hooks:
            hook.remove()
        for module, training in modes:
            module.training = training
        for bn, momentum in momenta:
            bn.momentum = momentum
    if not count:
        _restore(saved)
        if max_batches != 0:
            raise ValueError('re-estimating batch norms: no batch to run; the statistics are '
                             'left as they were')
    bad = [name or '<model>' for name, bn, _ in saved
           if not (torch.isfinite(bn.running_mean).all() and torch.isfinite(bn.running_var).all())]
    if bad:
        _restore(saved)
        raise ValueError('re-estimating batch norms gave NaN or infinite running statistics '
                         f'in {", ".join(bad[:3])}{" and others" if len(bad) > 3 else ""}: '
                         'the batches hold NaN or infinite values; the statistics are left as '
                         'they were')
    return count
