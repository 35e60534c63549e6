"""What pruning reads from ``data=`` and ``loss_fn=``: checked batches and a checked loss.

Data-driven criteria, the sensitivity allocation and the batch-norm re-estimation of
:func:`razorlib.prune` all read ``data`` as ``(inputs, targets)`` batches and score
with ``loss_fn(outputs, targets)``.  A batch of another shape (an mmengine dict, bare
inputs) or a loss that is not a finite scalar would otherwise surface as an error deep
in torch, or not at all: a NaN loss makes every score and every comparison NaN, and
the pruner then keeps arbitrary channels or cuts every group to its minimum.  Both are
checked here, each batch as it is read, with messages naming the batch and what to pass
instead.
"""
from collections.abc import Iterator
from typing import Any, Callable, Iterable, List, Mapping, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

from ..tracing.forward import flatten_tensors

__all__ = ['Batch', 'CheckedBatches', 'LossFn', 'batch_loss', 'batch_samples', 'batch_weights',
           'checked_loss', 'default_loss', 'pair_batches']

Batch = Tuple[Any, Any]
"""One ``(inputs, targets)`` batch."""

LossFn = Callable[[Any, Any], torch.Tensor]
"""``loss_fn(outputs, targets)`` -> a scalar tensor."""

_NONE = object()
"""What ``next`` gives for an empty ``data``."""


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


def pair_batches(data: Optional[Iterable[Any]], who: str) -> Iterable[Batch]:
    """``data`` as ``(inputs, targets)`` pairs, each batch checked.

    A one-shot iterator (a generator, ``iter(loader)``) is read into a list: it cannot
    be read twice; a list or tuple, in memory already, is checked whole.  Another
    re-iterable (a ``DataLoader``) is not held in memory: it is read again on every pass
    over the :class:`CheckedBatches` returned, each batch checked as it comes, so a
    training ``DataLoader`` costs one batch of memory at a time.  Its first batch is
    read and checked here, so that empty data, or a first batch of the wrong form, is
    refused before anything runs.

    Args:
        data: an iterable of ``(inputs, targets)`` batches (a list, a generator, a
            ``DataLoader`` yielding pairs).
        who: what reads the data, for the messages (``"importance 'taylor'"``).

    Raises:
        TypeError: ``data`` is not iterable.
        ValueError: ``data`` is None or empty, or a batch is not a pair (a dict gets a
            hint on mapping it); for a ``DataLoader``, a batch after the first is refused
            when a pass reaches it, and a pass that yields no batch is refused.

    Example:
        >>> batches = pair_batches([(torch.zeros(2, 3), torch.zeros(2))], 'x')
        >>> [inputs.shape for inputs, _ in batches]
        [torch.Size([2, 3])]
        >>> pair_batches([{'inputs': 1, 'data_samples': 2}], "importance 'taylor'")
        Traceback (most recent call last):
        ...
        ValueError: importance 'taylor': data batch 0 is a dict (keys 'inputs', ...) ... loader]
    """
    if data is None:
        raise ValueError(f'{who} is computed from data: pass data=, an iterable of (inputs, '
                         'targets) batches')
    if isinstance(data, CheckedBatches):  # checked as it is read already
        return data
    if not hasattr(data, '__iter__') and not hasattr(data, '__getitem__'):
        # iter() would refuse it in words that name neither data= nor who reads it
        raise TypeError(f'{who}: data= is an iterable of (inputs, targets) batches, not '
                        f'{type(data).__name__}')
    if isinstance(data, (Iterator, list, tuple)):  # read once, or in memory already
        batches = [_pair(batch, index, who) for index, batch in enumerate(data)]
        if not batches:
            raise ValueError(f'{who}: data= holds no batch')
        return batches
    return CheckedBatches(data, who)


class CheckedBatches(Iterable[Batch]):
    """A re-iterable ``data`` read pass by pass as checked ``(inputs, targets)`` pairs
    (:func:`pair_batches`).  Nothing is kept but the pass begun when it was made, whose
    first batch it checked: the first pass goes on from there, each later one reads
    ``data`` again."""

    def __init__(self, data: Iterable[Any], who: str):
        self.data, self.who = data, who
        batches = iter(data)
        first = next(batches, _NONE)
        if first is _NONE:
            raise ValueError(f'{who}: data= holds no batch')
        self._pending: Optional[Tuple[Batch, Iterator[Any]]] = (_pair(first, 0, who), batches)

    def __iter__(self) -> Iterator[Batch]:
        pending, self._pending = self._pending, None
        return self._resumed(*pending) if pending else self._new_pass()

    def _resumed(self, first: Batch, rest: Iterator[Any]) -> Iterator[Batch]:
        """The pass begun when this was made: its first batch, checked then, and the rest."""
        yield first
        for index, batch in enumerate(rest, 1):
            yield _pair(batch, index, self.who)

    def _new_pass(self) -> Iterator[Batch]:
        index = -1
        for index, batch in enumerate(self.data):
            yield _pair(batch, index, self.who)
        if index < 0:
            raise ValueError(f'{self.who}: data= holds no batch on a later pass: a list or a '
                             'DataLoader is read again on every pass, an iterator only once '
                             '(into a list)')


def _pair(batch: Any, index: int, who: str) -> Batch:
    """``batch`` as an ``(inputs, targets)`` pair, or an error naming it by ``index``."""
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
    return batch[0], batch[1]


def batch_samples(batch: Batch) -> Optional[int]:
    """The samples of an ``(inputs, targets)`` batch, what a batch-mean loss averages
    over: the first dim of the inputs' first tensor, where the targets agree (none, a
    sequence of one target per sample, or tensors all of that first dim, alone or in a
    tuple or dict); else None, unknown (a detection image's boxes, a time-major
    sequence).

    Example:
        >>> x = torch.zeros(4, 3)
        >>> batch_samples((x, torch.zeros(4))), batch_samples(({'ids': x}, [{}, {}, {}, {}]))
        (4, 4)
        >>> batch_samples((x, {'labels': torch.zeros(4), 'boxes': torch.zeros(4, 2)}))
        4
        >>> batch_samples((x, torch.zeros(7))) is None, batch_samples((x, None))
        (True, 4)
    """
    inputs, targets = batch
    first = next((t for t in flatten_tensors(inputs) if t.dim()), None)
    if first is None:
        return None
    samples = first.shape[0]
    if targets is None or (isinstance(targets, (list, tuple)) and len(targets) == samples):
        return samples
    tensors = flatten_tensors(targets)
    agrees = bool(tensors) and all(t.dim() and t.shape[0] == samples for t in tensors)
    return samples if agrees else None


def batch_weights(sizes: Sequence[int]) -> List[float]:
    """Each batch's weight, its samples over the mean batch's: ``B_b / mean(B)``.

    ``loss_fn`` is a batch mean, so a sample's gate gradient is its own loss's over the
    batch size: unweighted, a trailing batch of one sample would count as much as a
    full one, each of its samples ``B`` times another's.  Weighted by ``B_b``, every
    sample counts alike whatever its batch; over the mean, batches of one size weigh 1
    each, the scores of a sum over batches of their gradients as before.
    """
    mean = sum(sizes) / len(sizes)
    return [size / mean for size in sizes]


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
        returned = f'a shape {tuple(loss.shape)}' if isinstance(loss, torch.Tensor) else \
            f'{loss!r} of type {type(loss).__name__}'
        raise ValueError(f'{who}: loss_fn(outputs, targets) must return one number (a scalar '
                         f'tensor); it returned {returned}{where}')
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
