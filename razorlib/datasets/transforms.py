"""Tensor augmentations for CHW images, registered in ``TRANSFORMS``."""
import torch
import torch.nn.functional as F

from ..registry import TRANSFORMS


@TRANSFORMS.register_module()
class RandomShift:
    """Shift the image by up to ``max_shift`` pixels each way, filling with ``fill``.

    The same as a random crop of the original size from the image padded by
    ``max_shift`` (CIFAR's usual ``RandomCrop(32, padding=4)`` is ``max_shift=4``).

    Args:
        max_shift: the largest shift in pixels, per axis.
        fill: the value of the pixels shifted in.

    Example:
        >>> image = torch.rand(1, 8, 8)
        >>> RandomShift(1)(image).shape
        torch.Size([1, 8, 8])
        >>> torch.equal(RandomShift(0)(image), image)
        True
    """

    def __init__(self, max_shift: int = 1, fill: float = 0.0):
        if max_shift < 0:
            raise ValueError(f'max_shift must be >= 0, got {max_shift}')
        self.max_shift = max_shift
        self.fill = fill

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        shift = self.max_shift
        if shift == 0:
            return image
        height, width = image.shape[-2:]
        padded = F.pad(image, (shift, ) * 4, value=self.fill)
        top, left = torch.randint(0, 2 * shift + 1, (2, )).tolist()
        return padded[..., top:top + height, left:left + width]

    def __repr__(self) -> str:
        return f'{type(self).__name__}(max_shift={self.max_shift}, fill={self.fill})'


@TRANSFORMS.register_module()
class RandomFlip:
    """Mirror the image left-right with probability ``prob``.

    Args:
        prob: the flip probability.

    Example:
        >>> RandomFlip(prob=1.0)(torch.tensor([[[1., 2.]]])).tolist()
        [[[2.0, 1.0]]]
    """

    def __init__(self, prob: float = 0.5):
        if not 0 <= prob <= 1:
            raise ValueError(f'prob must be in [0, 1], got {prob}')
        self.prob = prob

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        return image.flip(-1) if torch.rand(()).item() < self.prob else image

    def __repr__(self) -> str:
        return f'{type(self).__name__}(prob={self.prob})'
