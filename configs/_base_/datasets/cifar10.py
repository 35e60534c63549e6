# CIFAR-10, python version, unpacked under data/cifar10 (nothing is downloaded).
dataset_type = 'CIFAR10'
data_root = 'data/cifar10'

train_dataloader = dict(
    batch_size=128,
    num_workers=4,
    persistent_workers=True,
    dataset=dict(type=dataset_type, data_root=data_root, split='train',
                 transforms=[dict(type='RandomShift', max_shift=4), dict(type='RandomFlip')]),
    sampler=dict(type='DefaultSampler', shuffle=True),
    collate_fn=dict(type='default_collate'))
val_dataloader = dict(
    batch_size=256,
    num_workers=4,
    persistent_workers=True,
    dataset=dict(type=dataset_type, data_root=data_root, split='test'),
    sampler=dict(type='DefaultSampler', shuffle=False),
    collate_fn=dict(type='default_collate'))
test_dataloader = val_dataloader
val_evaluator = dict(type='Accuracy', topk=(1, 5))
test_evaluator = val_evaluator
