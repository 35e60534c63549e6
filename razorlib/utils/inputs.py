"""Random example batches that leave the global random number generators alone."""
from typing import Sequence

import torch
import torch.nn as nn


def random_batch(model: nn.Module, input_shape: Sequence[int],
                 batch_size: int = 1) -> torch.Tensor:
    """A standard normal ``batch_size x input_shape`` batch on ``model``'s device and in
    its floating dtype (its first parameter's; float32 on the CPU without one), the same
    at every call: a float32 batch fails in the first layer of a half, bfloat16 or double
    model (a FLOPs count, or a trace without example inputs).

    It is drawn on the CPU from a generator of its own, so that a dry run, a FLOPs count
    or a trace made during training (``ResourceEstimatorHook``) leaves the global RNGs
    that shuffling, augmentation and dropout draw from as they were: logging must not
    change what is trained.

    Example:
        >>> conv = nn.Conv2d(3, 4, 1)
        >>> state = torch.get_rng_state()
        >>> batch = random_batch(conv, (3, 2, 2), batch_size=2)
        >>> batch.shape, torch.equal(batch, random_batch(nn.Identity(), (3, 2, 2), 2))
        (torch.Size([2, 3, 2, 2]), True)
        >>> torch.equal(state, torch.get_rng_state())
        True
    """
    batch = torch.randn(batch_size, *input_shape, generator=torch.Generator().manual_seed(0))
    param = next(model.parameters(), None)
    if param is None:
        return batch
    return batch.to(param.device, param.dtype if param.is_floating_point() else None)
