"""engine.data_check: the loader a tool checks is the one it runs on, and the check leaves
what the run reads as it would be without the check (persistent workers included)."""
from itertools import islice

import torch

from razorlib.engine.data_check import build_loader, checked_loader
from razorlib.engine.loops.bn_calibration import seeded

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
