"""ClsDataSample: the label and prediction of one image, as an mmengine data element."""
from typing import Any, Callable, Sequence, Union

import numpy as np
import torch
from mmengine.structures import BaseDataElement

LabelLike = Union[int, Sequence[int], np.ndarray, torch.Tensor]
ScoreLike = Union[Sequence[float], np.ndarray, torch.Tensor]


def to_label_tensor(value: LabelLike) -> torch.Tensor:
    """A 1-D int64 tensor of class indices from an int, a sequence, an array or a tensor.

    Args:
        value: one class index or several.

    Example:
        >>> to_label_tensor(3), to_label_tensor(np.array([1, 2]))
        (tensor([3]), tensor([1, 2]))
    """
    tensor = value if isinstance(value, torch.Tensor) else torch.as_tensor(np.asarray(value))
    if tensor.is_floating_point() or tensor.is_complex():
        raise TypeError(f'a label must be integer class indices, got {tensor.dtype}')
    return tensor.to(torch.long).reshape(-1)


def to_score_tensor(value: ScoreLike) -> torch.Tensor:
    """A 1-D float tensor of class scores; a tensor keeps its dtype and device.

    Args:
        value: one score per class.

    Example:
        >>> to_score_tensor([0.25, 0.75])
        tensor([0.2500, 0.7500])
    """
    tensor = value if isinstance(value, torch.Tensor) else torch.as_tensor(
        np.asarray(value), dtype=torch.float32)
    if not tensor.is_floating_point() or tensor.dim() != 1:
        raise TypeError('pred_score must be a 1-D float tensor of class scores, got '
                        f'{tensor.dtype} of shape {tuple(tensor.shape)}')
    return tensor


def _tensor_field(name: str, convert: Callable[[Any], torch.Tensor], doc: str) -> property:
    """A data-field property stored as ``_<name>`` (mmengine's convention for properties)
    that converts what it is set to with ``convert``."""
    private = '_' + name

    def fset(self: BaseDataElement, value: Any) -> None:
        self.set_field(convert(value), private, dtype=torch.Tensor)

    return property(lambda self: getattr(self, private), fset,
                    lambda self: delattr(self, private), doc)


class ClsDataSample(BaseDataElement):
    """The data fields of one classified image: ``gt_label``, ``pred_label``, ``pred_score``.

    ``gt_label`` and ``pred_label`` are stored as 1-D int64 tensors whatever they are set
    from; ``pred_score`` (and ``gt_score``, soft targets) is a 1-D float tensor of class
    scores.  Image metadata goes into ``metainfo`` as with any mmengine data element.
    The ``set_*`` methods are mmpretrain's ``DataSample`` API (they return the sample
    and record ``num_classes``), so mmpretrain's heads and metrics work on razorlib's
    datasets.

    Args:
        metainfo: metadata such as ``img_path``.
        **kwargs: data fields, e.g. ``gt_label=3``.

    Example:
        >>> sample = ClsDataSample(gt_label=3, metainfo=dict(img_path='a.png'))
        >>> sample.gt_label, sample.img_path
        (tensor([3]), 'a.png')
        >>> sample.pred_score = torch.tensor([0.1, 0.9])
        >>> sorted(sample.to_dict())
        ['gt_label', 'img_path', 'pred_score']
    """

    gt_label = _tensor_field('gt_label', to_label_tensor, 'The true class, 1-D int64.')
    gt_score = _tensor_field('gt_score', to_score_tensor,
                             'Soft targets (e.g. after mixup), 1-D float.')
    pred_label = _tensor_field('pred_label', to_label_tensor, 'The predicted class, 1-D int64.')
    pred_score = _tensor_field('pred_score', to_score_tensor, 'Class scores, 1-D float.')

    # mmpretrain's DataSample setters, so its heads, preprocessors and metrics can fill
    # and read the samples razorlib's datasets make (docs/mm_projects.md).
    def set_gt_label(self, value: LabelLike) -> 'ClsDataSample':
        """Set ``gt_label``; returns the sample (mmpretrain's ``DataSample`` API)."""
        self.gt_label = value
        return self

    def set_gt_score(self, value: ScoreLike) -> 'ClsDataSample':
        """Set ``gt_score`` and the ``num_classes`` metainfo; returns the sample."""
        self.gt_score = value
        self._set_num_classes(len(self.gt_score))
        return self

    def set_pred_label(self, value: LabelLike) -> 'ClsDataSample':
        """Set ``pred_label``; returns the sample."""
        self.pred_label = value
        return self

    def set_pred_score(self, value: ScoreLike) -> 'ClsDataSample':
        """Set ``pred_score`` and the ``num_classes`` metainfo; returns the sample.

        Example:
            >>> sample = ClsDataSample(gt_label=1).set_pred_score([0.2, 0.8]).set_pred_label(1)
            >>> sample.pred_label, sample.num_classes
            (tensor([1]), 2)
        """
        self.pred_score = value
        self._set_num_classes(len(self.pred_score))
        return self

    def _set_num_classes(self, count: int) -> None:
        known = self.metainfo.get('num_classes')
        if known is not None and known != count:
            raise ValueError(f'ClsDataSample: {count} class scores, but num_classes is {known}')
        self.set_metainfo(dict(num_classes=count))
