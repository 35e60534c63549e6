"""engine.data_check: the loader a tool checks is the one it runs on, and the check leaves
what the run reads as it would be without the check (persistent workers included)."""
from itertools import islice

import pytest
import torch

from razorlib.engine.config import ConfigError
from razorlib.engine.data_check import build_loader, check_input_shape, checked_loader
from razorlib.engine.loops.bn_calibration import seeded
from razorlib.models.data_preprocessor import ClsDataPreprocessor

SEED = 0
#: Random augmentation in a persistent worker, as configs/_base_/datasets/cifar10.py has.
CFG = dict(batch_size=4, num_workers=1, persistent_workers=True,
           dataset=dict(type='DigitsDataset', split='train', augment=True),
           sampler=dict(type='DefaultSampler', shuffle=True),
           collate_fn=dict(type='default_collate'))


def sums(batches):
    return [float(batch['inputs'].float().sum()) for batch in batches]


def test_the_check_leaves_what_persistent_workers_read_in_the_run():
    """The check's read started the persistent workers and advanced their augmentation's
    random state: the run's first pass then read other images (201.2 for 198.2)."""
    torch.manual_seed(SEED)
    with seeded(SEED):
        checked = checked_loader(CFG, 'train_dataloader', SEED)
    with_check = sums(islice(checked.loader, 2))
    torch.manual_seed(SEED)
    without = sums(islice(build_loader(CFG, 'train_dataloader', SEED), 2))
    assert with_check == without
    assert sums([checked.first_batch]) == without[:1]


class Sized(torch.nn.Module):
    """A model that counts its FLOPs on ``input_shape``, with the data preprocessor the
    pruning algorithms get by default."""

    def __init__(self, input_shape):
        super().__init__()
        self.input_shape = input_shape
        self.data_preprocessor = ClsDataPreprocessor()


def images(*sizes):
    """One batch of a list of images of ``sizes``, as pseudo_collate gives them."""
    return [dict(inputs=[torch.zeros(3, s, s, dtype=torch.uint8) for s in sizes],
                 data_samples=None)]


def test_check_input_shape_compares_the_preprocessed_images_of_one_size():
    with pytest.raises(ConfigError, match=r'^model.input_shape: \(3, 32, 32\), but the '
                       r'val_dataloader gives images of \(3, 8, 8\) \(after the data '
                       r'preprocessor\): the FLOPs are counted on a 1 x input_shape batch, '
                       r'so they would be those of other images; set '
                       r'model.input_shape=\(3, 8, 8\)$'):
        check_input_shape(Sized((3, 32, 32)), images(8, 8), 'val_dataloader', 'the FLOPs')
    check_input_shape(Sized((3, 8, 8)), images(8, 8), 'val_dataloader', 'the FLOPs')
    # several sizes: the preprocessor pads them to the batch's largest, no size to compare
    check_input_shape(Sized((3, 32, 32)), images(8, 6), 'val_dataloader', 'the FLOPs')
    check_input_shape(torch.nn.Identity(), [], 'val_dataloader', 'the FLOPs')  # no shape
