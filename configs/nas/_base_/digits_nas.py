# The digits with a held-out test split for NAS: search ranks subnets on 'val', results
# are reported on 'test' (1,077 train / 360 val / 360 test images, 16x16 RGB).
_base_ = ['../../_base_/datasets/digits.py']

split_ratios = dict(val_ratio=0.2, test_ratio=0.2)
train_dataloader = dict(dataset=split_ratios)
val_dataloader = dict(dataset=split_ratios)
test_dataloader = dict(
    batch_size=360,
    num_workers=0,
    dataset=dict(type='DigitsDataset', split='test', upscale=16, **split_ratios),
    sampler=dict(type='DefaultSampler', shuffle=False),
    collate_fn=dict(type='default_collate'))
