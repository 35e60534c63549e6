"""Shared by the pruning-algorithm tests: a tiny classifier, a digits batch, a linear
model whose Fisher is computed by hand, and a short run of a config in the Runner."""
from pathlib import Path
from typing import Dict, Sequence

import torch
import torch.nn as nn
from mmengine.config import Config
from mmengine.model import BaseModel
from mmengine.registry import init_default_scope
from mmengine.runner import Runner

from razorlib.datasets import DigitsDataset

REPO = Path(__file__).parents[2]
CONFIGS = REPO / 'configs' / 'pruning'


def tiny_classifier(channels: Sequence[int] = (8, 16)) -> dict:
    return dict(type='ImageClassifier',
                backbone=dict(type='PlainCNN', channels=tuple(channels)),
                head=dict(type='LinearClsHead', num_classes=10),
                data_preprocessor=dict(type='ClsDataPreprocessor', mean=[0.5] * 3,
                                       std=[0.5] * 3))


def digits_batch(size: int = 16) -> dict:
    dataset = DigitsDataset('train')
    items = [dataset[i] for i in range(size)]
    return dict(inputs=torch.stack([item['inputs'] for item in items]),
                data_samples=[item['data_samples'] for item in items])


class LinearChain(BaseModel):
    """``x -> Linear(2, 3) -> Linear(3, 4) -> Linear(4, 1)``, loss ``sum((y - t)**2) / 2``
    with the targets ``t`` passed as ``data_samples``: gradients simple enough to write
    out by hand."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc1, self.fc2, self.fc3 = nn.Linear(2, 3), nn.Linear(3, 4), nn.Linear(4, 1)

    def forward(self, inputs: torch.Tensor, data_samples=None, mode: str = 'tensor'):
        out = self.fc3(self.fc2(self.fc1(inputs)))
        if mode == 'loss':
            return dict(loss=((out - data_samples)**2).sum() / 2)
        return out


def run_config(name: str, work_dir: Path, options: Dict) -> Runner:
    """Train ``configs/pruning/<name>`` shortly in the Runner: batches of 256 (6
    iterations an epoch), one epoch, one validation, no checkpoint."""
    cfg = Config.fromfile(CONFIGS / name)
    cfg.merge_from_dict({'work_dir': str(work_dir), 'train_dataloader.batch_size': 256,
                         'train_cfg.max_epochs': 1, 'train_cfg.val_interval': 1,
                         'default_hooks.checkpoint': None, 'experiment_name': name,
                         **options})
    init_default_scope('razorlib')
    runner = Runner.from_cfg(cfg)
    runner.train()
    return runner
