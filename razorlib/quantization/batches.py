"""Graph inputs from a dataloader: the first ``steps`` batches, optionally with a progress bar.

Calibration and error analysis both walk a dataloader (any iterable of batches) and feed
an executor; ``collate_fn`` turns one batch into what the executor takes (a tensor, a
sequence in graph input order, or a dict by input name).  A numpy array is taken as a
tensor.  :func:`checked_inputs` makes a ``collate_fn`` that also checks each batch against
a graph's inputs (their number and dtypes), naming the batch.
"""
import itertools
import sys
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional

import numpy as np
import torch
from mmengine.utils import ProgressBar

from ..ir import BaseGraph
from ..ir.executor.shapes import check_input_dtype
from ..utils.checks import integer_number

__all__ = ['BatchToInputs', 'checked_inputs', 'graph_batches']

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
        TypeError: ``steps`` is not an int (a bool is not either).
        ValueError: ``steps`` is below 1.

    Example:
        >>> import torch
        >>> data = [(torch.zeros(2, 3), 0), (torch.ones(2, 3), 1), (torch.ones(2, 3), 2)]
        >>> [x.sum().item() for x in graph_batches(data, 2, collate_fn=lambda b: b[0])]
        [0.0, 6.0]
    """
    steps = integer_number(steps, 'steps', 'a number of batches', minimum=1)
    total = min(steps, len(dataloader)) if hasattr(dataloader, '__len__') else steps
    bar = ProgressBar(total, file=sys.stdout) if progress else None
    for batch in itertools.islice(dataloader, steps):
        yield _as_tensor(batch if collate_fn is None else collate_fn(batch))
        if bar is not None:
            bar.update()
    if bar is not None:
        bar.file.write('\n')


def _as_tensor(inputs: Any) -> Any:
    """A numpy array as a tensor (else it would be taken as a sequence of inputs)."""
    return torch.as_tensor(inputs) if isinstance(inputs, np.ndarray) else inputs


def checked_inputs(graph: BaseGraph, collate_fn: Optional[BatchToInputs] = None,
                   where: str = 'calibration batch') -> BatchToInputs:
    """A ``collate_fn`` that maps a batch with ``collate_fn`` and checks it fits ``graph``.

    The batches are counted from 0, and an error names the batch (``where`` and its
    index): a sequence of another length than the graph's inputs (with a hint for
    dataloaders that yield ``(inputs, labels)``), or a tensor of a dtype its input does
    not take (:func:`~razorlib.ir.executor.shapes.check_input_dtype`; a float16 batch
    for a float32 input is cast).  Shapes are left to the executor.

    Example:
        >>> from razorlib.ir import BaseGraph
        >>> graph = BaseGraph()
        >>> graph.mark_variable_as_graph_input(graph.create_variable('x', dtype=torch.float32))
        >>> collate = checked_inputs(graph)
        >>> collate(torch.zeros(2, dtype=torch.float16)).dtype
        torch.float32
        >>> collate((torch.zeros(2), 0))  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: calibration batch 1: graph 'graph' has 1 inputs ['x'], got a tuple of 2; \
a dataloader that yields (inputs, labels) needs a collate_fn that selects the inputs, ...
    """
    names = list(graph.inputs)
    counter = itertools.count()

    def collate(batch: Any) -> Any:
        here = f'{where} {next(counter)}'
        inputs = _as_tensor(batch if collate_fn is None else collate_fn(batch))
        if isinstance(inputs, (tuple, list)) and len(inputs) != len(names):
            raise ValueError(
                f'{here}: graph {graph.name!r} has {len(names)} inputs {names}, got a '
                f'{type(inputs).__name__} of {len(inputs)}; a dataloader that yields '
                '(inputs, labels) needs a collate_fn that selects the inputs, such as '
                'collate_fn=lambda batch: batch[0]')
        if isinstance(inputs, Mapping):
            pairs = [(name, value) for name, value in inputs.items() if name in graph.inputs]
        elif isinstance(inputs, (torch.Tensor, tuple, list)):
            tensors = [inputs] if isinstance(inputs, torch.Tensor) else list(inputs)
            pairs = list(zip(names, tensors))
        else:  # left to the executor, which says what it takes
            return inputs
        cast = {name: check_input_dtype(graph.name, graph.inputs[name], torch.as_tensor(value),
                                        here)
                for name, value in pairs if value is not None}
        if all(cast[name] is value for name, value in pairs if name in cast):
            return inputs
        if isinstance(inputs, Mapping):
            return {**inputs, **cast}
        if isinstance(inputs, torch.Tensor):
            return cast[names[0]]
        return [cast.get(name, value) for name, value in zip(names, inputs)]

    return collate
