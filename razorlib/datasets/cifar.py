"""CIFAR10: the python-pickle batches of CIFAR-10, read without running pickled code."""
import pickle
from pathlib import Path
from typing import Any, Sequence, Union

import numpy as np
import torch

from ..registry import DATASETS
from .base import ClsDataset, Transform

SPLIT_FILES = {
    'train': tuple(f'data_batch_{i}' for i in range(1, 6)),
    'test': ('test_batch', ),
}
ARCHIVE_FOLDER = 'cifar-10-batches-py'


class _BatchUnpickler(pickle.Unpickler):
    """Unpickles only what a CIFAR batch holds (dicts, lists, bytes, numpy arrays), so a
    tampered file cannot run code: that takes a global outside this list."""
    ALLOWED = {('numpy', 'ndarray'), ('numpy', 'dtype'), ('_codecs', 'encode'),
               *((f'numpy.{core}.{module}', name) for core in ('core', '_core')
                 for module, name in (('multiarray', '_reconstruct'),
                                      ('numeric', '_frombuffer')))}

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f'{module}.{name} has no place in a CIFAR batch')
        return super().find_class(module, name)


def load_batch(path: Path) -> dict:
    """One CIFAR batch as ``{'data': uint8 (N, 3072) array, 'labels': [...], ...}``.

    Args:
        path: a batch file such as ``data_batch_1``.
    """
    with open(path, 'rb') as file:
        try:
            # latin1 reads the Python 2 strings of the official files as str.
            batch = _BatchUnpickler(file, encoding='latin1').load()
        except pickle.UnpicklingError as err:
            raise ValueError(f'{path} is not a CIFAR-10 python batch: {err}') from err
    return {key.decode() if isinstance(key, bytes) else key: value
            for key, value in batch.items()}


@DATASETS.register_module()
class CIFAR10(ClsDataset):
    """CIFAR-10 (50,000 train and 10,000 test 32x32 RGB images, ten classes).

    Reads the "CIFAR-10 python version" batches (``data_batch_1`` ... ``data_batch_5``,
    ``test_batch``) from ``data_root`` or from its ``cifar-10-batches-py`` folder, as
    unpacked from https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz; nothing is
    downloaded.  Images stay uint8 in memory and come out as float in [0, 1].

    Args:
        data_root: the folder of the batch files, or the folder that holds
            ``cifar-10-batches-py``.
        split: ``'train'`` or ``'test'``.
        transforms: tensor transforms applied to each image, e.g.
            ``[dict(type='RandomShift', max_shift=4), dict(type='RandomFlip')]``.

    Example:
        >>> dataset = CIFAR10('data/cifar10', split='test')  # doctest: +SKIP
        >>> len(dataset), dataset[0]['inputs'].shape  # doctest: +SKIP
        (10000, torch.Size([3, 32, 32]))
    """
    classes = ('airplane', 'automobile', 'bird', 'cat', 'deer', 'dog', 'frog', 'horse',
               'ship', 'truck')

    def __init__(self, data_root: Union[str, Path], split: str = 'train',
                 transforms: Sequence[Union[dict, Transform]] = ()):
        if split not in SPLIT_FILES:
            raise ValueError(f'split must be one of {tuple(SPLIT_FILES)}, got {split!r}')
        super().__init__(transforms)
        root = Path(data_root)
        folder = root / ARCHIVE_FOLDER if (root / ARCHIVE_FOLDER).is_dir() else root
        batches = []
        for name in SPLIT_FILES[split]:
            path = folder / name
            if not path.is_file():
                raise FileNotFoundError(
                    f'CIFAR-10 batch file {path} not found: data_root must hold the python '
                    f'batches ({", ".join(SPLIT_FILES["train"] + SPLIT_FILES["test"])}) '
                    f'or their {ARCHIVE_FOLDER} folder')
            batches.append(load_batch(path))
        self.split = split
        data = np.concatenate([batch['data'] for batch in batches])
        self.images = torch.from_numpy(data.reshape(-1, 3, 32, 32))
        self.labels = [label for batch in batches for label in batch['labels']]
        if len(self.labels) != len(self.images):
            raise ValueError(f'{folder}: {len(self.images)} images but {len(self.labels)} '
                             'labels')

    def load_image(self, index: int) -> torch.Tensor:
        return self.images[index].float().div_(255)
