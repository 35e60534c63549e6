"""Batch-norm running statistics: keep them while a model trains, re-estimate them after
pruning."""
import sys
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

import torch
import torch.nn as nn

from ..tracing.forward import call_on_batch
from .caller import warn_at_caller


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


def _norm_input(args: tuple, kwargs: dict) -> Optional[torch.Tensor]:
    """The tensor a norm's call normalises: its ``input`` keyword, else its first tensor
    argument (None: no tensor, a subclass's own call)."""
    found = kwargs.get('input')
    if isinstance(found, torch.Tensor):
        return found
    return next((a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)), None)


def _dynamo() -> Optional[Any]:
    """``torch._dynamo`` if something imported it (a model may be compiled), else None:
    importing it takes a second, and nothing can be compiled without it."""
    return sys.modules.get('torch._dynamo')


def _eager(hook: Callable) -> Callable:
    """``hook``, run eagerly where it is called inside a compiled module."""
    return hook if _dynamo() is None else torch.compiler.disable(hook)


@contextmanager
def averaging_running_stats(norms: Iterable[nn.Module]) -> Iterator[None]:
    """Inside the block each norm's running statistics start afresh and become the
    average of those of the calls it runs, each call weighed by the elements per channel
    of its input (its samples times their positions): every sample counts alike, a
    trailing partial batch (a ``DataLoader``'s ``drop_last=False``) as its samples do.
    Calls of one size weigh alike: the average of PyTorch's ``momentum=None``, to the
    bit (``n / (k n)`` is ``1 / k``).  The momenta are put back on exit.

    Each call sets the norm's momentum to ``n / (seen + n)`` in a forward pre-hook and
    back to None after it; ``seen`` is counted per running-mean tensor, so that
    ``DataParallel``'s replicas, which share the hook, each count their own calls.  A
    norm run without its hooks (``F.batch_norm`` on its buffers, ``bn.forward(x)``), or
    on no tensor of two dims, meets ``momentum=None``: the plain average over its calls.
    The hooks run eagerly in a compiled submodule (dynamo would replay a graph traced
    with another call's momentum).  A norm without running statistics is left alone.

    Args:
        norms: ``_BatchNorm`` modules with running statistics.

    Example:
        >>> bn = nn.BatchNorm1d(1).train()
        >>> with averaging_running_stats([bn]):
        ...     _ = bn(torch.tensor([[0.], [2.]]))  # mean 1 over two samples
        ...     _ = bn(torch.full((4, 1), 4.0))  # mean 4 over four
        >>> bn.running_mean.item(), bn.momentum  # (2 * 1 + 4 * 4) / 6; momentum put back
        (3.0, 0.1)
    """
    norms = [bn for bn in norms if getattr(bn, 'running_mean', None) is not None]
    momenta = [(bn, bn.momentum) for bn in norms]
    seen: Dict[int, int] = {}

    def weigh(bn: nn.Module, args: tuple, kwargs: dict) -> None:
        x = _norm_input(args, kwargs)
        if x is None or x.dim() < 2:
            return
        n = x.numel() // max(bn.num_features, 1)  # the channels: wherever a subclass has them
        key = bn.running_mean.data_ptr()
        seen[key] = seen.get(key, 0) + n
        bn.momentum = n / seen[key] if n else 0.0

    def average(bn: nn.Module, *_: Any) -> None:
        bn.momentum = None  # a later call without the hooks: a plain average again

    weigh, average = _eager(weigh), _eager(average)
    hooks = [hook for bn in norms
             for hook in (bn.register_forward_pre_hook(weigh, with_kwargs=True),
                          bn.register_forward_hook(average))]
    try:
        for bn in norms:
            bn.reset_running_stats()
            bn.momentum = None
        yield
    finally:
        for hook in hooks:
            hook.remove()
        for bn, momentum in momenta:
            bn.momentum = momentum


def _as_reset(bn: nn.Module) -> bool:
    """Whether ``bn``'s running statistics are still those ``reset_running_stats`` left
    (no batch counted, mean 0, variance 1): no call reached it.  The mean and variance
    are looked at too, since a norm run as ``F.batch_norm`` on its buffers updates them
    without counting the batch."""
    tracked = getattr(bn, 'num_batches_tracked', None)
    return ((tracked is None or int(tracked) == 0) and not bn.running_mean.any()
            and bool((bn.running_var == 1).all()))


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
    momenta are put back.  A norm no batch reaches (a branch the model takes in train mode
    only, as an auxiliary head) keeps the statistics it had, with a warning naming it:
    reset and never run, it would normalise with a mean of 0 and a variance of 1.

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
    # a compiled model runs its module eagerly here: each call's momentum differs, which
    # would make dynamo compile the model again for every batch
    dynamo = _dynamo()
    if dynamo is not None and isinstance(model, dynamo.eval_frame.OptimizedModule):
        model = model._orig_mod
    saved = [entry for entry in _saved_stats(model) if entry[1].track_running_stats]
    if not saved:
        return 0
    modes = [(m, m.training) for m in model.modules()]
    count = 0
    try:
        model.eval()
        for _, bn, _ in saved:
            bn.train()
        with torch.no_grad(), averaging_running_stats(bn for _, bn, _ in saved):
            for inputs in batches:
                if max_batches is not None and count >= max_batches:
                    break
                call_on_batch(model, inputs, 're-estimating batch norms', count)
                count += 1
    except BaseException:
        _restore(saved)
        raise
    finally:
        for module, training in modes:
            module.training = training
    if not count:
        _restore(saved)
        if max_batches != 0:
            raise ValueError('re-estimating batch norms: no batch to run; the statistics are '
                             'left as they were')
        return 0
    bad = [name or '<model>' for name, bn, _ in saved
           if not (torch.isfinite(bn.running_mean).all() and torch.isfinite(bn.running_var).all())]
    if bad:
        _restore(saved)
        raise ValueError('re-estimating batch norms gave NaN or infinite running statistics '
                         f'in {", ".join(bad[:3])}{" and others" if len(bad) > 3 else ""}: '
                         'the batches hold NaN or infinite values; the statistics are left as '
                         'they were')
    unrun = [entry for entry in saved if _as_reset(entry[1])]
    if unrun:  # reset and never run: its old statistics beat a mean of 0 and variance of 1
        _restore(unrun)
        names = [name or '<model>' for name, _, _ in unrun]
        warn_at_caller(f're-estimating batch norms: {", ".join(names[:3])}'
                       f'{" and others" if len(names) > 3 else ""} ran on none of the '
                       f'{count} batch(es) (a branch the model takes in train mode only, or '
                       'not on these inputs): their running statistics are left as they were, '
                       'not re-estimated', UserWarning)
    return count
