"""End to end: mmengine's Runner trains and validates a classifier on the digits."""
import pytest
from mmengine.runner import Runner


@pytest.fixture
def runner(tmp_path):
    dataloader = dict(num_workers=0, persistent_workers=False)
    return Runner(
        model=dict(type='ImageClassifier',
                   backbone=dict(type='PlainCNN', channels=(16, 32, 64)),
                   head=dict(type='LinearClsHead', num_classes=10),
                   data_preprocessor=dict(type='ClsDataPreprocessor', mean=[0.5] * 3,
                                          std=[0.5] * 3)),
        work_dir=str(tmp_path),
        train_dataloader=dict(dataloader, batch_size=32,
                              dataset=dict(type='DigitsDataset', split='train', augment=True),
                              sampler=dict(type='DefaultSampler', shuffle=True),
                              collate_fn=dict(type='default_collate')),
        val_dataloader=dict(dataloader, batch_size=128,
                            dataset=dict(type='DigitsDataset', split='val'),
                            sampler=dict(type='DefaultSampler', shuffle=False),
                            collate_fn=dict(type='pseudo_collate')),
        val_evaluator=dict(type='Accuracy', topk=(1, 5)),
        train_cfg=dict(by_epoch=True, max_epochs=3, val_interval=3),
        val_cfg=dict(),
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.1, momentum=0.9)),
        default_hooks=dict(checkpoint=None),
        default_scope='razorlib',
        randomness=dict(seed=0),
    )


def test_runner_trains_digits_to_high_accuracy(runner):
    runner.train()
    metrics = runner.val()
    assert metrics['accuracy/top1'] > 85
    assert metrics['accuracy/top5'] >= metrics['accuracy/top1']
