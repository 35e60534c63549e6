# ImageNet-1k as class folders (data/imagenet/train/<wnid>/*.JPEG, same for val), 224x224.
# val takes its classes from the train folder: a class folder missing from val would
# otherwise shift every later label.
dataset_type = 'ImageFolder'
data_root = 'data/imagenet'

train_dataloader = dict(
    batch_size=64,
    num_workers=8,
    persistent_workers=True,
    dataset=dict(type=dataset_type, data_root=data_root + '/train', size=224,
                 transforms=[dict(type='RandomFlip')]),
    sampler=dict(type='DefaultSampler', shuffle=True),
    collate_fn=dict(type='default_collate'))
val_dataloader = dict(
    batch_size=64,
    num_workers=8,
    persistent_workers=True,
    dataset=dict(type=dataset_type, data_root=data_root + '/val', size=224,
                 classes=data_root + '/train'),
    sampler=dict(type='DefaultSampler', shuffle=False),
    collate_fn=dict(type='default_collate'))
test_dataloader = val_dataloader
val_evaluator = dict(type='Accuracy', topk=(1, 5))
test_evaluator = val_evaluator
