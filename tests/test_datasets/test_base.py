"""ClsDataset: the transforms every dataset takes."""
import pytest
import torch

from razorlib.datasets import ClsDataset, DigitsDataset, RandomFlip
from razorlib.registry import DATASETS


class Ones(ClsDataset):
    classes, labels = ('a', 'b'), [0, 1]

    def load_image(self, index):
        return torch.arange(4.).reshape(1, 2, 2)


def test_transforms_are_built_from_configs_and_applied_in_order():
    dataset = Ones([dict(type='RandomFlip', prob=1.0), lambda image: image + 1])
    assert isinstance(dataset.transforms[0], RandomFlip)
    assert dataset[0]['inputs'].tolist() == [[[2., 1.], [4., 3.]]]


@pytest.mark.parametrize('transforms', [dict(type='RandomFlip', prob=1.0), 'RandomFlip'])
def test_one_transform_not_in_a_list_is_refused_by_name(transforms):
    # a dict iterated as its keys kept 'type' as a transform: "'str' object is not
    # callable" at the first image, in a loader's worker
    with pytest.raises(TypeError) as info:
        DATASETS.build(dict(type='DigitsDataset', split='val', transforms=transforms))
    assert str(info.value) == ('DigitsDataset: transforms must be a list of transforms or '
                               f'their configs, got {transforms!r}: put it in a list')


@pytest.mark.parametrize('entry', ['RandomFlip', None, 3])
def test_a_transform_that_is_no_callable_is_refused_by_name(entry):
    with pytest.raises(TypeError) as info:
        Ones([dict(type='RandomFlip'), entry])
    assert str(info.value) == ("Ones: transforms must be callables or their config dicts "
                               f"(dict(type='RandomFlip')), got {entry!r}")


def test_augment_shifts_before_the_transforms_given():
    dataset = DigitsDataset('val', augment=True, transforms=[dict(type='RandomFlip')])
    assert [type(t).__name__ for t in dataset.transforms] == ['RandomShift', 'RandomFlip']
