# The pattern of docs/mm_projects.md, with extproj standing in for mmpretrain: the
# project's own ImageClassifier and ClsDataPreprocessor (names razorlib registers too),
# default_scope the project's, razorlib's components named 'razorlib.X' (and, inside
# razorlib.AutoSlim, its pruner without the prefix), razorlib's digits dataset, training
# and a greedy search in one config.
custom_imports = dict(imports=['razorlib', 'extproj.models'], allow_failed_imports=False)
default_scope = 'extproj'

model = dict(
    type='razorlib.AutoSlim',
    architecture=dict(type='ImageClassifier', width=8, num_classes=10,
                      data_preprocessor=dict(num_classes=10, mean=[0.5] * 3, std=[0.5] * 3)),
    pruner=dict(type='RatioPruner', ratios=(0.25, 0.5, 0.75, 1.0)),
    input_shape=(3, 8, 8))

_loader = dict(num_workers=0, collate_fn=dict(type='default_collate'))
train_dataloader = dict(_loader, batch_size=64, sampler=dict(type='DefaultSampler', shuffle=True),
                        dataset=dict(type='razorlib.DigitsDataset', split='train'))
val_dataloader = dict(_loader, batch_size=360, sampler=dict(type='DefaultSampler', shuffle=False),
                      dataset=dict(type='razorlib.DigitsDataset', split='val'))
val_evaluator = dict(type='razorlib.Accuracy', topk=(1, ))
optim_wrapper = dict(optimizer=dict(type='SGD', lr=0.1, momentum=0.9))
train_cfg = dict(by_epoch=True, max_epochs=3, val_interval=3)
val_cfg = dict()
default_hooks = dict(checkpoint=dict(type='CheckpointHook', interval=1),
                     logger=dict(type='LoggerHook', interval=10))
custom_hooks = [dict(type='razorlib.DumpSubnetHook')]
randomness = dict(seed=0)

# tools/search.py CONFIG CHECKPOINT runs this as its validation loop.  The supernet spans
# about 32k FLOPs (whole) to 5k (1 of 4 bins per space).
search_cfg = dict(type='razorlib.GreedySearchLoop', target_flops=[25000, 12000],
                  max_channel_bins=4, recalib_batches=1)
