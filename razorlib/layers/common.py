"""Helpers the built-in kinds share: index checks and the channel-binding patterns."""
from typing import Dict, List, Sequence

import numpy as np

__all__ = ['per_group', 'bind_blocks', 'check_indices', 'prod']


def check_indices(name: str, axis: str, kept: Dict[str, Sequence[int]], size: int) -> List[int]:
    """The kept indices of ``axis`` (all of them if not named), checked against ``size``."""
    index = kept.get(axis)
    if index is None:
        return list(range(size))
    index = [int(i) for i in index]
    if any(not 0 <= i < size for i in index) or len(set(index)) != len(index):
        raise ValueError(f'{name}: kept {axis} channels {index[:8]}... are not distinct '
                         f'indices below {size}')
    return index


def per_group(name: str, axis: str, index: Sequence[int], size: int, groups: int) -> List[int]:
    """The in-group positions kept, which must be the same in every group.

    Example:
        >>> per_group('conv', 'output', [0, 2, 4, 6], 8, 2)
        [0, 2]
    """
    per = size // groups
    kept = [[i % per for i in index if i // per == g] for g in range(groups)]
    if any(k != kept[0] for k in kept):
        raise ValueError(f'{name} is a group conv/norm with {groups} groups: its kept {axis} '
                         'channels must be the same positions in every group')
    return kept[0]


def bind_blocks(ctx, slots: np.ndarray, groups: int, reason: str) -> None:
    """Bind position ``i`` of every one of ``groups`` equal blocks of ``slots``, so that
    each group keeps the same channels."""
    blocks = slots.reshape(groups, -1)
    ctx.bind(np.tile(blocks[0], groups - 1), blocks[1:].ravel(), reason)


def prod(values: Sequence[int]) -> int:
    """The product of ``values`` as a Python int (1 for none)."""
    out = 1
    for value in values:
        out *= int(value)
    return out
