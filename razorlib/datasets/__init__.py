"""Datasets (registered in ``DATASETS``) and tensor transforms (in ``TRANSFORMS``).

Each dataset yields ``{'inputs': CHW float tensor in [0, 1], 'data_samples':
ClsDataSample}`` and has ``metainfo['classes']``, as mmengine's Runner expects.
"""
from .base import ClsDataset
from .cifar import CIFAR10
from .digits import DigitsDataset
from .image_folder import ImageFolder
from .transforms import RandomFlip, RandomShift

__all__ = ['CIFAR10', 'ClsDataset', 'DigitsDataset', 'ImageFolder', 'RandomFlip',
           'RandomShift']
