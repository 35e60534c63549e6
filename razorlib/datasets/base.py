"""ClsDataset: images with one class each, yielded in the form mmengine's Runner feeds.

Every dataset here yields ``{'inputs': CHW float tensor in [0, 1], 'data_samples':
ClsDataSample(gt_label)}``, which both ``pseudo_collate`` and ``default_collate`` batch
and :class:`~razorlib.models.ClsDataPreprocessor` normalises.
"""
from typing import Callable, Dict, Sequence, Tuple, Union

import torch
from torch.utils.data import Dataset

from ..models.data_sample import ClsDataSample
from ..registry import TRANSFORMS

Transform = Callable[[torch.Tensor], torch.Tensor]


class ClsDataset(Dataset):
    """Base class: subclasses set ``classes`` and ``labels`` and implement ``load_image``.

    Args:
        transforms: tensor-to-tensor callables (or their configs in ``TRANSFORMS``, e.g.
            ``dict(type='RandomShift', max_shift=4)``) applied in order to each image.

    Example:
        >>> class Ones(ClsDataset):
        ...     classes, labels = ('a', 'b'), [0, 1]
        ...     def load_image(self, index):
        ...         return torch.ones(1, 2, 2)
        >>> item = Ones()[1]
        >>> item['inputs'].shape, item['data_samples'].gt_label, len(Ones())
        (torch.Size([1, 2, 2]), tensor([1]), 2)
    """
    classes: Tuple[str, ...]
    labels: Sequence[int]

    def __init__(self, transforms: Sequence[Union[dict, Transform]] = ()):
        name = type(self).__name__
        # one dict or name iterates as its keys or letters: 'type' would be kept as a
        # transform and fail at the first image, in a loader's worker, as "'str' object
        # is not callable"
        if isinstance(transforms, (dict, str)):
            raise TypeError(f'{name}: transforms must be a list of transforms or their '
                            f'configs, got {transforms!r}: put it in a list')
        built = [TRANSFORMS.build(t) if isinstance(t, dict) else t for t in transforms]
        wrong = [t for t in built if not callable(t)]
        if wrong:
            raise TypeError(f'{name}: transforms must be callables or their config dicts '
                            f"(dict(type='RandomFlip')), got {wrong[0]!r}")
        self.transforms = built

    @property
    def metainfo(self) -> Dict[str, Tuple[str, ...]]:
        """``{'classes': class names}``; mmengine's Runner hands it to the evaluator."""
        return dict(classes=tuple(self.classes))

    def load_image(self, index: int) -> torch.Tensor:
        """The CHW float image in [0, 1] at ``index``, before the transforms."""
        raise NotImplementedError

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> dict:
        image = self.load_image(index)
        for transform in self.transforms:
            image = transform(image)
        sample = ClsDataSample(gt_label=int(self.labels[index]),
                               metainfo=dict(sample_idx=index))
        return dict(inputs=image, data_samples=sample)
