"""EpochSeedHook in an iteration-based loop: a run resumed from an iteration checkpoint
ends with the weights of the uninterrupted run, though augmentation and dropout draw
from the global RNGs in every iteration."""
from pathlib import Path

import torch
import torch.nn as nn
from mmengine.model import BaseModel
from mmengine.runner import Runner
from torch.utils.data import Dataset

from razorlib.engine.hooks import EpochSeedHook
from razorlib.engine.hooks.epoch_seed import SeededBatches

MAX_ITERS = 8
SAVED_AT = 4  # the data (4 batches of 4) restarts at the first iteration after it


class NoisyPoints(Dataset):
    """16 points whose augmentation is noise from the global torch RNG."""

    def __len__(self) -> int:
        return 16

    def __getitem__(self, index: int) -> dict:
        point = torch.full((4, ), float(index))
        return dict(inputs=point + 0.1 * torch.randn(4), data_samples=point.sum(0, True))


class DropoutRegressor(BaseModel):
    """A linear model behind dropout: every training step draws from the global RNG."""

    def __init__(self):
        super().__init__()
        self.dropout, self.fc = nn.Dropout(0.5), nn.Linear(4, 1)

    def forward(self, inputs, data_samples=None, mode='tensor'):
        out = self.fc(self.dropout(inputs))
        if mode == 'loss':
            return dict(loss=((out - data_samples)**2).mean())
        return out


def train(work_dir: Path, name: str, resume: str = None) -> dict:
    torch.manual_seed(123)  # the model's initial weights, the same in both runs
    runner = Runner(
        model=DropoutRegressor(), work_dir=str(work_dir), experiment_name=name,
        train_dataloader=dict(dataset=NoisyPoints(), batch_size=4, num_workers=0,
                              collate_fn=dict(type='default_collate'),
                              sampler=dict(type='DefaultSampler', shuffle=True)),
        train_cfg=dict(by_epoch=False, max_iters=MAX_ITERS),
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=1e-3)),
        default_hooks=dict(checkpoint=dict(type='CheckpointHook', by_epoch=False,
                                           interval=SAVED_AT),
                           logger=dict(type='LoggerHook', interval=100)),
        custom_hooks=[EpochSeedHook()], randomness=dict(seed=7), default_scope='razorlib',
        resume=resume is not None, load_from=resume)
    runner.train()
    return {key: value.clone() for key, value in runner.model.state_dict().items()}


def test_a_run_resumed_from_an_iteration_checkpoint_ends_as_the_uninterrupted_one(tmp_path):
    straight = train(tmp_path / 'straight', 'seed_resume_straight')
    resumed = train(tmp_path / 'resumed', 'seed_resume_resumed',
                    resume=str(tmp_path / 'straight' / f'iter_{SAVED_AT}.pth'))
    for key, value in straight.items():
        assert torch.equal(value, resumed[key]), key


def test_seeded_batches_reseed_from_the_index_of_the_batch_they_fetch():
    seen = []
    batches = SeededBatches(iter('abc'), seen.append)
    assert [next(batches) for _ in range(3)] == ['a', 'b', 'c'] and seen == [0, 1, 2]
