"""ClsDataPreprocessor: normalise and batch images, and pack labels into data samples."""
from typing import List, Optional, Sequence, Union

import torch
from mmengine.model import ImgDataPreprocessor

from ..registry import MODELS
from .data_sample import ClsDataSample


@MODELS.register_module()
class ClsDataPreprocessor(ImgDataPreprocessor):
    """mmengine's ``ImgDataPreprocessor`` plus label packing for classification.

    Inputs may be a list of CHW tensors (``pseudo_collate``) or an NCHW tensor
    (``default_collate``); they are moved to the model's device, cast to float,
    normalised with ``(x - mean) / std`` and stacked.  A 1-value mean and std apply to
    every channel (grayscale or not); 3 values need 3-channel images: others are
    refused the same way from either collate function (an NCHW grayscale batch would
    otherwise be broadcast to 3 channels silently).  ``data_samples`` may be a list
    of :class:`ClsDataSample` (kept as they are), or bare labels (a tensor or a list of
    ints, as a plain ``(image, label)`` dataset yields), which are packed into one
    :class:`ClsDataSample` per image.

    Args:
        mean: per-channel mean (1 value for every channel, or 3 for RGB images) in the
            scale of the inputs; ``None`` for no normalisation.
        std: per-channel std, given together with ``mean``.
        pad_size_divisor: pad images so that height and width divide by this.
        pad_value: the padding value.
        non_blocking: copy to the device asynchronously.

    Example:
        >>> pre = ClsDataPreprocessor(mean=[0.5], std=[0.5])
        >>> out = pre(dict(inputs=[torch.ones(1, 8, 8), torch.zeros(1, 8, 8)],
        ...                data_samples=torch.tensor([3, 7])))
        >>> out['inputs'].shape, out['inputs'][:, 0, 0, 0].tolist()
        (torch.Size([2, 1, 8, 8]), [1.0, -1.0])
        >>> [sample.gt_label.item() for sample in out['data_samples']]
        [3, 7]

    Raises:
        ValueError: ``mean`` has 3 values and an image has another channel count.
    """

    def __init__(self, mean: Optional[Sequence[float]] = None,
                 std: Optional[Sequence[float]] = None, pad_size_divisor: int = 1,
                 pad_value: float = 0, non_blocking: bool = False):
        super().__init__(mean, std, pad_size_divisor, pad_value, non_blocking=non_blocking)

    def forward(self, data: dict, training: bool = False) -> dict:
        self._check_channels(data['inputs'])
        data = super().forward(data, training)
        data['data_samples'] = pack_labels(data['data_samples'])
        return data

    def _check_channels(self, inputs: Union[torch.Tensor, Sequence[torch.Tensor]]) -> None:
        """Refuse images whose channel count differs from a 3-value mean's: an NCHW batch
        would be broadcast against it (a grayscale batch silently made 3-channel), while
        mmengine stops a list of the same images with a bare assertion."""
        if not self._enable_normalize or len(self.mean) == 1:
            return
        if isinstance(inputs, torch.Tensor):
            channels = [inputs.shape[1]] if inputs.dim() == 4 else []
        else:  # other inputs are left to mmengine's own checks
            channels = [image.shape[0] for image in inputs or ()
                        if isinstance(image, torch.Tensor) and image.dim() == 3]
        wrong = next((c for c in channels if c != len(self.mean)), None)
        if wrong is not None:
            mean = ', '.join(f'{value:g}' for value in self.mean.flatten().tolist())
            raise ValueError(
                f'{type(self).__name__}: mean [{mean}] has '
                f'{len(self.mean)} values, one per channel, but an input image has {wrong} '
                f'channel(s): give a 1-value mean and std for grayscale images, or convert '
                f'them to {len(self.mean)} channels')


def pack_labels(
        data_samples: Union[None, torch.Tensor, Sequence[Union[int, ClsDataSample]]]
) -> Optional[List[ClsDataSample]]:
    """Data samples as a list of :class:`ClsDataSample`, wrapping bare labels.

    Args:
        data_samples: ``None``, data samples, or one label per image.

    Example:
        >>> [s.gt_label.item() for s in pack_labels([1, 2])]
        [1, 2]
    """
    if data_samples is None:
        return None
    return [sample if isinstance(sample, ClsDataSample) else ClsDataSample(gt_label=sample)
            for sample in data_samples]
