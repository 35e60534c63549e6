"""What pruning reads from ``data=`` and ``loss_fn=``: checked batches and a checked loss.

Data-driven criteria, the sensitivity allocation and the batch-norm re-estimation of
:func:`razorlib.prune` all read ``data`` as ``(inputs, targets)`` batches and score
with ``loss_fn(outputs, targets)``.  A batch of another shape (an mmengine dict, bare
inputs) or a loss that is not a finite scalar would otherwise surface as an error deep
in torch, or not at all: a NaN loss makes every score and every comparison NaN, and
the pruner then keeps arbitrary channels or cuts every group to its minimum.  Both are
checked here, once, with messages naming the batch and what to pass instead.
"""
from typing import Any, Callable, Iterable, List, Mapping, Optional, Tuple

import torch
import torch.nn.functional as F

__all__ = ['Batch', 'LossFn', 'batch_loss', 'checked_loss', 'default_loss', 'pair_batches']

Batch = Tuple[Any, Any]
"""One ``(inputs, targets)`` batch."""

LossFn = Callable[[Any, Any], torch.Tensor]
"""``loss_fn(outputs, targets)`` -> a scalar tensor."""


def default_loss(outputs: Any, targets: Any) -> torch.Tensor:
    """Cross-entropy of a classifier's logits: the loss data-driven criteria default to.

    Raises:
        TypeError: the model returns something else than a logits tensor (a Hugging Face
            ``ModelOutput``, a tuple) or the batches hold no targets; the message says
            what to pass as ``loss_fn``.

    Example:
        >>> default_loss({'logits': torch.zeros(2, 3)}, None)
        Traceback (most recent call last):
        ...
        TypeError: the default loss (cross-entropy of logits) needs ... pass loss_fn=lambda ...
    """
    if not isinstance(outputs, torch.Tensor) or not isinstance(targets, torch.Tensor):
        given = 'None' if targets is None else f'a {type(targets).__name__}'
        raise TypeError(
            'the default loss (cross-entropy of logits) needs the model to return a logits '
            f'tensor and the batches to hold targets; the model returned a '
            f'{type(outputs).__name__}, the targets are {given}: pass loss_fn=lambda '
            'outputs, targets: ... (for a Hugging Face model with labels in its inputs: '
            'lambda out, targets: out.loss)')
    return F.cross_entropy(outputs, targets)


def pair_batches(data: Optional[Iterable[Any]], who: str) -> List[Batch]:
    """``data`` read into a list of ``(inputs, targets)`` pairs, each batch checked.

    Args:
        data: an iterable of ``(inputs, targets)`` batches (a list, a generator, a
            ``DataLoader`` yielding pairs).
        who: what reads the data, for the messages (``"importance 'taylor'"``).

    Raises:
        ValueError: ``data`` is None or empty, or a batch is not a pair (a dict gets a
            hint on mapping it).

    Example:
        >>> pair_batches([(torch.zeros(2, 3), torch.zeros(2))], 'x')[0][0].shape
        torch.Size([2, 3])
        >>> pair_batches([{'inputs': 1, 'data_samples': 2}], "importance 'taylor'")
        Traceback (most recent call last):
        ...
        ValueError: importance 'taylor': data batch 0 is a dict (keys 'inputs', ...) ... loader]
    """
    if data is None:
        raise ValueError(f'{who} is computed from data: pass data=, an iterable of (inputs, '
                         'targets) batches')
    batches = []
    for index, batch in enumerate(data):
        if isinstance(batch, Mapping):
            keys = list(batch)
            raise ValueError(
                f'{who}: data batch {index} is a dict (keys '
                f'{", ".join(repr(k) for k in keys[:4])}), not an (inputs, targets) pair; '
                f'map it, e.g. data=[(b[{keys[0]!r}], b[{keys[-1]!r}]) for b in loader]')
        if not isinstance(batch, (tuple, list)) or len(batch) != 2:
            size = f' of {len(batch)}' if isinstance(batch, (tuple, list)) else ''
            raise ValueError(f'{who}: data batch {index} is a {type(batch).__name__}{size}, '
                             'not an (inputs, targets) pair')
        batches.append((batch[0], batch[1]))
    if not batches:
        raise ValueError(f'{who}: data= holds no batch')
    return batches


def checked_loss(loss: Any, who: str, where: str = '') -> torch.Tensor:
    """``loss`` as a 0-d tensor, refused unless it is one finite number.

    Args:
        loss: what ``loss_fn`` returned.
        who: what computed it, for the messages.
        where: which batch or cut, for the messages (``' on batch 2'``).

    Raises:
        ValueError: not a one-element tensor, or NaN / infinite (NaN inputs or outputs,
            targets out of range for the loss, a diverged model).

    Example:
        >>> checked_loss(torch.tensor([0.5]), 'x')
        tensor(0.5000)
        >>> checked_loss(torch.tensor(float('nan')), "importance 'taylor'", ' on batch 1')
        Traceback (most recent call last):
        ...
        ValueError: importance 'taylor': the loss on batch 1 is nan; check the data ...
    """
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        shape = f'shape {tuple(loss.shape)}' if isinstance(loss, torch.Tensor) else \
            type(loss).__name__
        raise ValueError(f'{who}: loss_fn(outputs, targets) must return one number (a scalar '
                         f'tensor); it returned a {shape}{where}')
    if not torch.isfinite(loss.detach()).all():
        raise ValueError(f'{who}: the loss{where} is {float(loss.detach())}; check the data '
                         '(NaN or infinite inputs), the targets and loss_fn')
    return loss.reshape(())


def batch_loss(loss_fn: Optional[LossFn], outputs: Any, targets: Any, who: str,
               where: str = '') -> torch.Tensor:
    """``loss_fn(outputs, targets)`` (default :func:`default_loss`), checked by
    :func:`checked_loss`; an error inside ``loss_fn`` keeps its type and gains a note
    saying who called it, on which batch."""
    try:
        loss = (loss_fn or default_loss)(outputs, targets)
    except Exception as err:
        err.add_note(f'{who}: raised by loss_fn(outputs, targets){where}')
        raise
    return checked_loss(loss, who, where)
