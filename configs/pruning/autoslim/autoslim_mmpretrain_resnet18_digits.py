# mmpretrain's ImageClassifier + ResNet-18 (CIFAR stem) as an AutoSlim supernet on
# razorlib's offline digits, and its greedy search, from a config of mmpretrain's world
# (docs/mm_projects.md).  Needs mmpretrain, which razorlib does not install:
#   pip install --no-deps mmpretrain==1.2.0
#   pip install einops model-index rich mat4py importlib-metadata
#   python tools/train.py configs/pruning/autoslim/autoslim_mmpretrain_resnet18_digits.py
#   python tools/search.py configs/pruning/autoslim/autoslim_mmpretrain_resnet18_digits.py \
#       work_dirs/autoslim_mmpretrain_resnet18_digits/epoch_10.pth
custom_imports = dict(imports=['razorlib', 'mmpretrain'], allow_failed_imports=False)
# The project's scope: unqualified types are mmpretrain's (ImageClassifier, ResNet_CIFAR,
# ClsDataPreprocessor, Accuracy, mmengine's hooks); razorlib's are named 'razorlib.X'.
default_scope = 'mmpretrain'

model = dict(
    type='razorlib.AutoSlim',
    architecture=dict(
        type='ImageClassifier',
        backbone=dict(type='ResNet_CIFAR', depth=18, stem_channels=16, base_channels=16),
        neck=dict(type='GlobalAveragePooling'),
        head=dict(type='LinearClsHead', num_classes=10, in_channels=128),
        data_preprocessor=dict(type='ClsDataPreprocessor', num_classes=10,
                               mean=[0.5, 0.5, 0.5], std=[0.5, 0.5, 0.5])),
    # Inside razorlib.AutoSlim the pruner is looked up in razorlib's scope: no prefix.
    pruner=dict(type='RatioPruner', ratios=(0.25, 0.5, 0.75, 1.0)),
    num_random_samples=1,
    input_shape=(3, 32, 32))

# razorlib's datasets yield razorlib's ClsDataSample, which has mmpretrain's DataSample
# setters (set_pred_score, ...), so mmpretrain's heads and metrics work on them.
_loader = dict(num_workers=0, collate_fn=dict(type='default_collate'))
train_dataloader = dict(
    _loader, batch_size=64, sampler=dict(type='DefaultSampler', shuffle=True),
    dataset=dict(type='razorlib.DigitsDataset', split='train', upscale=32, augment=True))
val_dataloader = dict(
    _loader, batch_size=360, sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(type='razorlib.DigitsDataset', split='val', upscale=32))
val_evaluator = dict(type='Accuracy', topk=(1, ))

optim_wrapper = dict(optimizer=dict(type='SGD', lr=0.1, momentum=0.9, weight_decay=5e-4))
param_scheduler = [dict(type='CosineAnnealingLR', T_max=10, by_epoch=True, begin=0, end=10)]
train_cfg = dict(by_epoch=True, max_epochs=10, val_interval=5)
val_cfg = dict()

default_hooks = dict(
    timer=dict(type='IterTimerHook'),
    logger=dict(type='LoggerHook', interval=10),
    param_scheduler=dict(type='ParamSchedulerHook'),
    checkpoint=dict(type='CheckpointHook', interval=5))
custom_hooks = [
    dict(type='razorlib.ResourceEstimatorHook'),  # FLOPs/params next to the accuracy
    dict(type='razorlib.DumpSubnetHook'),  # subnets in training; a search's results
]
randomness = dict(seed=0)

# tools/search.py runs it as the validation loop; the loop is razorlib's, so it is named
# with the scope ('GreedySearchLoop' alone is refused by the config check).
search_cfg = dict(type='razorlib.GreedySearchLoop', target_flops=[20e6, 10e6],
                  max_channel_bins=4, recalib_batches=8)
