# A config of another project (scope 'extproj') that wraps its own model in razorlib's
# AutoSlim, reaching razorlib only through custom_imports and 'razorlib.' type names.
custom_imports = dict(imports=['razorlib', 'extproj.models'], allow_failed_imports=False)
default_scope = 'extproj'

model = dict(
    type='razorlib.AutoSlim',
    architecture=dict(type='ExtClassifier', width=8),
    pruner=dict(type='RatioPruner', ratios=(0.5, 1.0)),
    input_shape=(3, 8, 8))
model_wrapper_cfg = dict(type='razorlib.AutoSlimDDP')

_loader = dict(num_workers=0, sampler=dict(type='DefaultSampler', shuffle=False),
               collate_fn=dict(type='default_collate'))
train_dataloader = dict(_loader, batch_size=64,
                        dataset=dict(type='razorlib.DigitsDataset', split='train'))
val_dataloader = dict(_loader, batch_size=360,
                      dataset=dict(type='razorlib.DigitsDataset', split='val'))
val_evaluator = dict(type='razorlib.Accuracy', topk=(1, ))
optim_wrapper = dict(optimizer=dict(type='SGD', lr=0.1, momentum=0.9))
train_cfg = dict(by_epoch=True, max_epochs=1, val_interval=1)
val_cfg = dict()
default_hooks = dict(checkpoint=None, logger=dict(type='LoggerHook', interval=10))
custom_hooks = [dict(type='razorlib.ResourceEstimatorHook'),
                dict(type='razorlib.DumpSubnetHook')]
randomness = dict(seed=0)
