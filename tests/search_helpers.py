"""A tiny AutoSlim stand-in and runner configs for the search loop and search tool tests.

``TinyAutoSlim`` has the interface the loops rely on (``architecture``, ``pruner``,
``set_subnet``, ``export_subnet``, ``flops_params``, ``val_step``) and trains a random
width per step, a crude slimmable supernet that is good enough to search.
"""
import uuid
from typing import Optional, Tuple

import pytest
import torch
from mmengine.model import BaseModel
from mmengine.runner import Runner

from razorlib.pruning import RatioPruner
from razorlib.registry import MODELS
from razorlib.utils import get_model_complexity

INPUT_SHAPE = (1, 3, 8, 8)


@pytest.fixture(autouse=True, scope='module')
def one_thread():
    """Run on one thread: for models this small, two OpenMP threads on a busy two-core
    machine spin-wait each other and make every conv tens of times slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@MODELS.register_module(force=True)
class TinyAutoSlim(BaseModel):
    """An ImageClassifier with a prepared RatioPruner; a random width per train step."""

    def __init__(self, architecture: dict, input_shape: Tuple[int, ...] = INPUT_SHAPE):
        architecture = MODELS.build(architecture)
        super().__init__(data_preprocessor=architecture.data_preprocessor)
        self.architecture = architecture
        self.input_shape = input_shape
        self.pruner = RatioPruner()
        self.pruner.prepare_from_supernet(architecture, torch.randn(input_shape))

    def forward(self, inputs, data_samples=None, mode='tensor'):
        return self.architecture(inputs, data_samples, mode)

    def train_step(self, data, optim_wrapper):
        self.pruner.set_subnet(self.pruner.sample_subnet())
        return super().train_step(data, optim_wrapper)

    def set_subnet(self, subnet):
        self.pruner.set_subnet(subnet)

    def export_subnet(self):
        return self.pruner.export_subnet()

    def flops_params(self):
        return get_model_complexity(self.architecture, torch.randn(self.input_shape))


def runner_cfg(work_dir, val_cfg: Optional[dict] = None, epochs: int = 1) -> dict:
    """A runner config: TinyAutoSlim over PlainCNN(8, 16, 32) on 8x8 digits.

    Small batches and a 90-image validation split keep each subnet's score cheap.
    """
    loader = dict(num_workers=0, persistent_workers=False, collate_fn=dict(type='default_collate'))
    return dict(
        model=dict(type='TinyAutoSlim', architecture=dict(
            type='ImageClassifier', backbone=dict(type='PlainCNN', channels=(8, 16, 32)),
            head=dict(type='LinearClsHead', num_classes=10),
            data_preprocessor=dict(type='ClsDataPreprocessor', mean=[0.5] * 3, std=[0.5] * 3))),
        work_dir=str(work_dir),
        train_dataloader=dict(loader, batch_size=16,
                              dataset=dict(type='DigitsDataset', split='train', augment=True),
                              sampler=dict(type='DefaultSampler', shuffle=True)),
        train_cfg=dict(by_epoch=True, max_epochs=epochs, val_interval=epochs + 1),
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.1, momentum=0.9)),
        val_dataloader=dict(loader, batch_size=30,
                            dataset=dict(type='DigitsDataset', split='val', val_ratio=0.05),
                            sampler=dict(type='DefaultSampler', shuffle=False)),
        val_evaluator=dict(type='Accuracy', topk=(1, )),
        val_cfg=val_cfg or dict(),
        default_hooks=dict(checkpoint=None, logger=dict(type='LoggerHook', interval=1000)),
        default_scope='razorlib',
        randomness=dict(seed=0),
        log_level='WARNING',
        experiment_name=f'test_{uuid.uuid4().hex[:12]}',  # runners of one second stay apart
    )


def build_runner(work_dir, val_cfg: Optional[dict] = None, load_from=None) -> Runner:
    cfg = runner_cfg(work_dir, val_cfg)
    return Runner(**cfg, load_from=None if load_from is None else str(load_from))


def train_supernet(work_dir, epochs: int = 3):
    """Train TinyAutoSlim on digits and return the path of its checkpoint."""
    runner = Runner(**runner_cfg(work_dir, epochs=epochs))
    runner.train()
    path = work_dir / 'supernet.pth'
    torch.save(dict(state_dict=runner.model.state_dict()), path)
    return path
