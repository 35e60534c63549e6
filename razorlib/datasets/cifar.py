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
IMAGE_BYTES = 3 * 32 * 32


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
    """One CIFAR batch as ``{'data': uint8 (N, 3072) array, 'labels': [...], ...}``,
    checked, so that a file of another layout is refused naming it instead of scrambling
    pixels or labels.

    Args:
        path: a batch file such as ``data_batch_1``.
    """
    with open(path, 'rb') as file:
        try:
            # latin1 reads the Python 2 strings of the official files as str.
            batch = _BatchUnpickler(file, encoding='latin1').load()
        except Exception as err:  # cut or foreign bytes fail with almost any error type
            raise ValueError(f'{path} is not a CIFAR-10 python batch (an empty, truncated '
                             f'or foreign file?): {type(err).__name__}: {err}') from err
    if not isinstance(batch, dict):
        raise ValueError(f'{path} is not a CIFAR-10 python batch: it holds a '
                         f'{type(batch).__name__}, not a dict with data and labels')
    batch = {key.decode() if isinstance(key, bytes) else key: value
             for key, value in batch.items()}
    _check_batch(batch, path)
    return batch


def _check_batch(batch: dict, path: Path) -> None:
    """Refuse a batch whose data or labels are not CIFAR-10's, naming the file."""
    missing = [key for key in ('data', 'labels') if key not in batch]
    if missing:
        raise ValueError(f'{path} is not a CIFAR-10 python batch: no {missing} in its keys '
                         f'{sorted(map(str, batch))} (a CIFAR-100 batch has fine_labels)')
    data = batch['data']
    if not (isinstance(data, np.ndarray) and data.dtype == np.uint8 and data.ndim == 2
            and data.shape[1] == IMAGE_BYTES):
        layout = (f'{data.dtype} array of shape {data.shape}' if isinstance(data, np.ndarray)
                  else type(data).__name__)
        raise ValueError(f'{path}: data must be a uint8 array of shape (N, {IMAGE_BYTES}) '
                         '(per row the 1024 red, 1024 green, then 1024 blue pixels of a 32x32 '
                         f'image), got a {layout}')
    labels = np.asarray(batch['labels'])
    if labels.shape != (len(data), ):
        raise ValueError(f'{path}: {len(data)} images but labels of shape {labels.shape}')
    if not len(labels):
        return
    if labels.dtype.kind not in 'iu':
        raise ValueError(f'{path}: labels must be whole numbers, got {labels.dtype}')
    if labels.min() < 0 or labels.max() >= len(CIFAR10.classes):
        raise ValueError(f'{path}: labels must be 0 to {len(CIFAR10.classes) - 1} (the '
                         f'CIFAR-10 classes), got {labels.min()} to {labels.max()}')


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

    def load_image(self, index: int) -> torch.Tensor:
        return self.images[index].float().div_(255)
