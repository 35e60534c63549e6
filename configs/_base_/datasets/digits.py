# scikit-learn's 8x8 digits (offline), upscaled to 16x16 RGB; 1,437 train / 360 val images.
dataset_type = 'DigitsDataset'
image_size = 16

train_dataloader = dict(
    batch_size=32,
    num_workers=0,  # in-memory tensors: workers only add overhead
    dataset=dict(type=dataset_type, split='train', upscale=image_size, augment=True),
    sampler=dict(type='DefaultSampler', shuffle=True),
    collate_fn=dict(type='default_collate'))
val_dataloader = dict(
    batch_size=360,
    num_workers=0,
    dataset=dict(type=dataset_type, split='val', upscale=image_size),
    sampler=dict(type='DefaultSampler', shuffle=False),
    collate_fn=dict(type='default_collate'))
test_dataloader = val_dataloader
val_evaluator = dict(type='Accuracy', topk=(1, 5))
test_evaluator = val_evaluator
