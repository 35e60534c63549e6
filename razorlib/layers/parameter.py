"""Bare parameters: tensors a forward uses directly (position embeddings, layer scale,
class tokens), owned by a module that has no layer kind of its own.

The tracer gives each dim of such a tensor its own slots, bound to whatever the tensor
meets (an add with a token map, a multiply with a channel map); pruning slices those
dims.  A masked supernet records the kept entries of each pruned dim in a buffer on the
owner (:func:`param_mask_name`) so that counting sees the sliced size.
"""
import re
from typing import Dict, Sequence

import torch

from .base import IN_MASK, OUT_MASK, take
from .common import prod

__all__ = ['PARAM_MASK', 'is_mask_name', 'param_mask_name', 'plan_param',
           'param_channel_weights', 'kept_param_size']


#: A name :func:`param_mask_name` writes: the tensor's attribute, then the dim.
PARAM_MASK = re.compile(r'^(?P<attr>.+)_mask_dim\d+$')


def is_mask_name(name: str) -> bool:
    """Whether ``name`` is one of the buffers a masked supernet adds to a module (its
    ``in_mask``/``out_mask``, or a parameter's :func:`param_mask_name`), not its own state.

    Example:
        >>> is_mask_name('out_mask'), is_mask_name('pos_embed_mask_dim2'), is_mask_name('bias')
        (True, True, False)
    """
    return name in (IN_MASK, OUT_MASK) or PARAM_MASK.match(name) is not None


def param_mask_name(attr: str, dim: int) -> str:
    """The name of the buffer holding the keep-mask of dim ``dim`` of ``attr``.

    Example:
        >>> param_mask_name('pos_embed', 2)
        'pos_embed_mask_dim2'
    """
    return f'{attr}_mask_dim{dim}'


def plan_param(tensor: torch.Tensor, kept: Dict[int, Sequence[int]]) -> torch.Tensor:
    """``tensor`` keeping ``kept[dim]`` (indices) on each dim named."""
    for dim, index in sorted(kept.items()):
        tensor = take(tensor, dim, index)
    return tensor


def param_channel_weights(tensor: torch.Tensor, dim: int) -> torch.Tensor:
    """``(channels, n)``: the entries of ``tensor`` that each index of ``dim`` owns."""
    return tensor.detach().movedim(dim, 0).reshape(tensor.shape[dim], -1)


def kept_param_size(tensor: torch.Tensor, kept: Dict[int, int]) -> int:
    """The number of entries left when dim ``d`` keeps ``kept[d]`` indices.

    Example:
        >>> kept_param_size(torch.zeros(1, 197, 768), {2: 384})
        75648
    """
    shape = [kept.get(dim, size) for dim, size in enumerate(tensor.shape)]
    return prod(shape)
