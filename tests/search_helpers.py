"""Runner configs for the search loop and search tool tests: AutoSlim on 8x8 digits."""
import uuid
from typing import Optional

from mmengine.runner import Runner

INPUT_SHAPE = (3, 8, 8)
ARCHITECTURE = dict(
    type='ImageClassifier', backbone=dict(type='PlainCNN', channels=(8, 16, 32)),
    head=dict(type='LinearClsHead', num_classes=10),
    data_preprocessor=dict(type='ClsDataPreprocessor', mean=[0.5] * 3, std=[0.5] * 3))


def runner_cfg(work_dir, val_cfg: Optional[dict] = None) -> dict:
    """An untrained AutoSlim over PlainCNN(8, 16, 32) on 8x8 digits (seeded, so every
    runner builds the same weights).

    Small batches and a 90-image validation split keep each subnet's score cheap.
    """
    loader = dict(num_workers=0, persistent_workers=False, collate_fn=dict(type='default_collate'))
    return dict(
        model=dict(type='AutoSlim', architecture=ARCHITECTURE, input_shape=INPUT_SHAPE),
        work_dir=str(work_dir),
        train_dataloader=dict(loader, batch_size=16,
                              dataset=dict(type='DigitsDataset', split='train', augment=True),
                              sampler=dict(type='DefaultSampler', shuffle=True)),
        train_cfg=dict(by_epoch=True, max_epochs=1),
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.1, momentum=0.9)),
        val_dataloader=dict(loader, batch_size=30,
                            dataset=dict(type='DigitsDataset', split='val', val_ratio=0.05),
                            sampler=dict(type='DefaultSampler', shuffle=False)),
        val_evaluator=dict(type='Accuracy', topk=(1, )),
        val_cfg=val_cfg or dict(),
        default_hooks=dict(checkpoint=None, logger=dict(type='LoggerHook', interval=1000)),
        custom_hooks=[dict(type='DumpSubnetHook')],  # writes the chosen subnets
        default_scope='razorlib',
        randomness=dict(seed=0),
        log_level='WARNING',
        experiment_name=f'test_{uuid.uuid4().hex[:12]}',  # runners of one second stay apart
    )


def build_runner(work_dir, val_cfg: Optional[dict] = None) -> Runner:
    return Runner(**runner_cfg(work_dir, val_cfg))
