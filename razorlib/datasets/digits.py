"""DigitsDataset: scikit-learn's bundled 8x8 handwritten digits, the offline default."""
from typing import Optional, Sequence, Tuple, Union

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from ..registry import DATASETS
from .base import ClsDataset, Transform
from .transforms import RandomShift

SPLITS = ('train', 'val', 'test')


@DATASETS.register_module()
class DigitsDataset(ClsDataset):
    """The 1,797 8x8 digit images that ship with scikit-learn (no download), ten classes.

    The images are split once, stratified by class and with a fixed seed, so ``'train'``
    and ``'val'`` are disjoint and the same on every machine (1,437 and 360 images at
    the default 20% validation).  With ``test_ratio`` a ``'test'`` split is held out
    first (stratified, same seed) and ``val_ratio`` is taken of the whole set from the
    rest, e.g. 1,077 / 360 / 360 at 0.2 and 0.2: a search ranks subnets on ``'val'``
    and reports on ``'test'``.  Splits made with different ratios overlap (the plain
    ``'val'`` is the 0.2/0.2 ``'test'``, and the 0.2/0.2 ``'val'`` lies in the plain
    ``'train'``), so all datasets of one run must share ``val_ratio`` and ``test_ratio``.
    Pixels are scaled from 0-16 to [0, 1].

    Args:
        split: ``'train'``, ``'val'`` or ``'test'`` (needs ``test_ratio > 0``).
        in_channels: 1 for gray images or 3 to repeat them as RGB (what ImageNet-style
            backbones expect).
        upscale: resize the images to ``upscale x upscale`` (e.g. 16 or 32).
        upscale_mode: ``F.interpolate`` mode for ``upscale``: ``'nearest'``,
            ``'bilinear'``, ...
        augment: shift each image at random by up to one pixel (for training).
        val_ratio: fraction of each class held out for ``'val'``.
        test_ratio: fraction of each class held out for ``'test'``; 0 (the default)
            leaves ``'train'`` and ``'val'`` exactly as without it.
        seed: seed of the split.
        transforms: more tensor transforms, applied after the shift.

    Example:
        >>> train = DigitsDataset('train', upscale=16)
        >>> len(train), len(DigitsDataset('val')), train.metainfo['classes'][:3]
        (1437, 360, ('0', '1', '2'))
        >>> item = train[0]
        >>> item['inputs'].shape, item['data_samples'].gt_label.shape
        (torch.Size([3, 16, 16]), torch.Size([1]))
        >>> [len(DigitsDataset(s, test_ratio=0.2)) for s in ('train', 'val', 'test')]
        [1077, 360, 360]
    """
    classes = tuple(str(digit) for digit in range(10))

    def __init__(self, split: str = 'train', in_channels: int = 3,
                 upscale: Optional[int] = None, upscale_mode: str = 'nearest',
                 augment: bool = False, val_ratio: float = 0.2, test_ratio: float = 0.0,
                 seed: int = 0, transforms: Sequence[Union[dict, Transform]] = ()):
        if split not in SPLITS:
            raise ValueError(f'split must be one of {SPLITS}, got {split!r}')
        if in_channels not in (1, 3):
            raise ValueError(f'in_channels must be 1 or 3, got {in_channels}')
        if not 0 < val_ratio < 1:
            raise ValueError(f'val_ratio must be between 0 and 1 (exclusive), got {val_ratio}')
        if not 0 <= test_ratio < 1 or not 0 < val_ratio + test_ratio < 1:
            raise ValueError(f'val_ratio {val_ratio} and test_ratio {test_ratio} must leave '
                             'images for training (0 <= test_ratio, val + test < 1)')
        if split == 'test' and test_ratio == 0:
            raise ValueError("split 'test' needs test_ratio > 0 (e.g. 0.2)")
        super().__init__(transforms)
        if augment:
            self.transforms.insert(0, RandomShift(1))
        self.split = split
        digits = load_digits()
        self.indices = three_way_split(digits.target, val_ratio, test_ratio,
                                       seed)[SPLITS.index(split)]
        images = torch.from_numpy(digits.images[self.indices]).float().div_(16).unsqueeze(1)
        if upscale is not None:
            # clamped: 'bicubic' overshoots the strokes' edges (to -0.25 and 1.23), out of
            # the [0, 1] every dataset here yields
            images = F.interpolate(images, size=(upscale, upscale),
                                   mode=upscale_mode).clamp_(0, 1)
        self.images = images.expand(-1, in_channels, -1, -1).contiguous()
        self.labels = digits.target[self.indices].tolist()

    def load_image(self, index: int) -> torch.Tensor:
        # a copy: an in-place transform (x.mul_(2)) would otherwise change the stored
        # image, and compound on every later read
        return self.images[index].clone()


def split_indices(targets: np.ndarray, val_ratio: float,
                  seed: int) -> Tuple[np.ndarray, np.ndarray]:
    """Sorted train and val indices of a stratified split of ``targets``.

    Args:
        targets: the class of every sample.
        val_ratio: fraction held out for validation.
        seed: seed of the split.

    Example:
        >>> train, val = split_indices(np.array([0, 0, 0, 0, 1, 1, 1, 1]), 0.5, seed=0)
        >>> len(train), len(val), sorted(set(train) | set(val)) == list(range(8))
        (4, 4, True)
    """
    train, val = train_test_split(np.arange(len(targets)), test_size=val_ratio,
                                  stratify=targets, random_state=seed)
    return np.sort(train), np.sort(val)


def three_way_split(targets: np.ndarray, val_ratio: float, test_ratio: float,
                    seed: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sorted train, val and test indices; test is empty when ``test_ratio`` is 0, and
    then train and val are exactly :func:`split_indices`'s.

    Example:
        >>> parts = three_way_split(np.repeat([0, 1], 10), 0.2, 0.2, seed=0)
        >>> [len(p) for p in parts], sorted(np.concatenate(parts).tolist()) == list(range(20))
        ([12, 4, 4], True)
    """
    if test_ratio == 0:
        return (*split_indices(targets, val_ratio, seed), np.array([], dtype=np.int64))
    rest, test = split_indices(targets, test_ratio, seed)
    train, val = split_indices(targets[rest], val_ratio / (1 - test_ratio), seed)
    return rest[train], rest[val], test
