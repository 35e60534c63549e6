"""Graph inputs from a dataloader: the first ``steps`` batches, optionally with a progress bar.

Calibration and error analysis both walk a dataloader (any iterable of batches) and feed
an executor; ``collate_fn`` turns one batch into what the executor takes (a tensor, a
sequence in graph input order, or a dict by input name).
"""
import itertools
import sys
from typing import Any, Callable, Iterable, Iterator, Optional

from mmengine.utils import ProgressBar

__all__ = ['BatchToInputs', 'graph_batches']

BatchToInputs = Callable[[Any], Any]
"""Maps one batch of a dataloader to the graph's inputs."""


def graph_batches(dataloader: Iterable, steps: int,
                  collate_fn: Optional[BatchToInputs] = None,
                  progress: bool = False) -> Iterator[Any]:
    """Yield the graph inputs of the first ``steps`` batches of ``dataloader``.

    Args:
        dataloader: any iterable of batches (a ``DataLoader``, a list of tensors).
        steps: how many batches at most; fewer when the dataloader runs out.
        collate_fn: maps a batch to graph inputs; batches are taken as they are when None.
        progress: show an ``mmengine`` progress bar on stdout.

    Yields:
        Graph inputs, one per batch.

    Raises:
        ValueError: ``steps`` is not positive.

    Example:
        >>> import torch
        >>> data = [(torch.zeros(2, 3), 0), (torch.ones(2, 3), 1), (torch.ones(2, 3), 2)]
        >>> [x.sum().item() for x in graph_batches(data, 2, collate_fn=lambda b: b[0])]
        [0.0, 6.0]
    """
    if steps < 1:
        raise ValueError(f'steps must be a positive number of batches, got {steps}')
    total = min(steps, len(dataloader)) if hasattr(dataloader, '__len__') else steps
    bar = ProgressBar(total, file=sys.stdout) if progress else None
    for batch in itertools.islice(dataloader, steps):
        yield batch if collate_fn is None else collate_fn(batch)
        if bar is not None:
            bar.update()
    if bar is not None:
        bar.file.write('\n')
