"""Re-estimate BatchNorm statistics for the subnet a masked supernet computes.

A slimmable supernet shares one set of BatchNorm buffers between all its widths, so the
running statistics fit none of them well.  AutoSlim recalibrates them on a few training
batches before a subnet is evaluated; :func:`recalibrate_bn` does that.
"""
import random
from contextlib import contextmanager
from itertools import islice
from typing import Iterable, Iterator

import numpy as np
import torch
from mmengine.dist import all_reduce
from mmengine.model import BaseModel
from torch.utils.data import DataLoader, IterableDataset
from torch.nn.modules.batchnorm import _BatchNorm

from ...utils.batch_norm import averaging_running_stats
from ...utils.modes import kept_modes


@contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Seed python's, numpy's and torch's generators and restore them on exit.

    Args:
        seed: the seed for the duration of the block.

    Example:
        >>> with seeded(0):
        ...     first = torch.rand(2)
        >>> with seeded(0):
        ...     torch.equal(first, torch.rand(2))
        True
    """
    python_state, numpy_state = random.getstate(), np.random.get_state()
    with torch.random.fork_rng():
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)
        try:
            yield
        finally:
            random.setstate(python_state)
            np.random.set_state(numpy_state)


def fresh_workers(loader: Iterable) -> Iterable:
    """``loader``, or for a DataLoader with persistent workers a twin whose workers start
    anew with each pass: a persistent worker carries its random state from one pass to
    the next, so seeding the main process would not repeat its augmentations.

    Example:
        >>> from torch.utils.data import DataLoader, IterableDataset
        >>> loader = DataLoader(range(8), batch_size=4, num_workers=1, persistent_workers=True)
        >>> twin = fresh_workers(loader)
        >>> twin.persistent_workers, twin.batch_sampler is loader.batch_sampler
        (False, True)
    """
    if not (isinstance(loader, DataLoader) and loader.num_workers and loader.persistent_workers):
        return loader
    if isinstance(loader.dataset, IterableDataset):  # batched by the loader, no sampler
        batching = dict(batch_size=loader.batch_size, drop_last=loader.drop_last)
    elif loader.batch_sampler is None:  # batch_size=None: items as the dataset gives them
        batching = dict(sampler=loader.sampler, batch_size=None)
    else:
        batching = dict(batch_sampler=loader.batch_sampler)
    return DataLoader(loader.dataset, **batching, num_workers=loader.num_workers,
                      collate_fn=loader.collate_fn, pin_memory=loader.pin_memory,
                      timeout=loader.timeout, worker_init_fn=loader.worker_init_fn,
                      multiprocessing_context=loader.multiprocessing_context,
                      generator=loader.generator, prefetch_factor=loader.prefetch_factor,
                      pin_memory_device=loader.pin_memory_device,
                      in_order=loader.in_order, persistent_workers=False)


def recalibrate_bn(model: BaseModel, dataloader: Iterable, num_batches: int,
                   seed: int = 0) -> int:
    """Reset every BatchNorm's running statistics and re-estimate them on training data.

    The statistics become the average over ``num_batches`` batches, each weighed by its
    samples (:func:`~razorlib.utils.batch_norm.averaging_running_stats`: batches of one
    size weigh alike, a trailing partial one as its samples do), computed in train mode
    under ``no_grad`` with the model's current subnet; momenta and the train/eval mode
    are restored afterwards.  Random
    augmentations and shuffling draw from generators seeded with ``seed`` (a loader's
    persistent workers are started afresh, :func:`fresh_workers`), so every subnet is
    calibrated on the same images.  Under distributed training each rank
    averages its statistics with the others.

    Args:
        model: an mmengine model (not a DDP wrapper): its ``data_preprocessor`` prepares
            each batch and its ``'tensor'`` forward runs it.
        dataloader: training batches.
        num_batches: how many batches to use (fewer if the dataloader ends first);
            0 leaves the statistics as they are.
        seed: the seed of the data order and augmentations.

    Returns:
        The number of batches used.

    Example:
        >>> from razorlib.models import ImageClassifier
        >>> model = ImageClassifier(backbone=dict(type='PlainCNN', channels=(8, )),
        ...                         head=dict(type='LinearClsHead', num_classes=2))
        >>> batches = [dict(inputs=torch.randn(4, 3, 8, 8) + 5, data_samples=[0, 1, 0, 1])]
        >>> recalibrate_bn(model.eval(), batches, num_batches=1)
        1
        >>> bn = model.backbone.stages[0].bn
        >>> bool(bn.running_mean.abs().sum() > 0), model.training
        (True, False)
    """
    if num_batches < 1:
        return 0
    norms = [m for m in model.modules() if isinstance(m, _BatchNorm) and m.track_running_stats]
    used = 0
    with kept_modes(model), torch.no_grad(), seeded(seed), averaging_running_stats(norms):
        model.train()
        for batch in islice(fresh_workers(dataloader), num_batches):
            model._run_forward(model.data_preprocessor(batch, True), mode='tensor')
            used += 1
    if used == 0:
        raise RuntimeError('BatchNorm recalibration got no batches: the dataloader is empty')
    for norm in norms:
        all_reduce(norm.running_mean, op='mean')
        all_reduce(norm.running_var, op='mean')
    return used
