"""Tensor transforms: RandomShift and RandomFlip."""
import pytest
import torch

from razorlib.datasets import RandomFlip, RandomShift
from razorlib.registry import TRANSFORMS


def test_random_shift_moves_content_and_fills():
    torch.manual_seed(0)
    image = torch.zeros(1, 5, 5)
    image[0, 2, 2] = 1
    positions = set()
    for _ in range(100):
        out = RandomShift(2, fill=0.0)(image)
        assert out.shape == image.shape and out.sum() == 1
        positions.add(tuple(out[0].nonzero()[0].tolist()))
    assert positions == {(r, c) for r in range(5) for c in range(5)}
    assert RandomShift(1, fill=0.5)(torch.zeros(1, 1, 1)).item() in (0.0, 0.5)


def test_random_flip_probability():
    torch.manual_seed(0)
    image = torch.arange(4.).view(1, 1, 4)
    assert torch.equal(RandomFlip(prob=0.0)(image), image)
    flips = sum(torch.equal(RandomFlip(0.5)(image), image.flip(-1)) for _ in range(200))
    assert 70 < flips < 130


def test_built_from_registry_and_validated():
    assert repr(TRANSFORMS.build(dict(type='RandomShift', max_shift=4))) == \
        'RandomShift(max_shift=4, fill=0.0)'
    with pytest.raises(ValueError, match='max_shift'):
        RandomShift(-1)
    with pytest.raises(ValueError, match='prob'):
        RandomFlip(1.5)
