# First-order DARTS on the digits: each step, the architecture parameters (Adam) step on
# one half of the batch, then the weights (SGD) on the other half.  After training,
# DumpSubnetHook writes subnet_final.yaml: every edge at its largest weight (argmax).
#   python tools/train.py configs/nas/darts/darts_digits_supernet.py
_base_ = [
    '../_base_/darts_digits_space.py',
    '../_base_/digits_nas.py',
    '../../_base_/default_runtime.py',
]

max_epochs = 10
model = dict(type='DARTS', architecture=_base_.architecture, input_shape=(3, 16, 16))
# Under --launcher pytorch: DDP that runs DARTS's two steps (every candidate runs, so
# no parameter is unused).
model_wrapper_cfg = dict(type='razorlib.SPOSDDP', find_unused_parameters=False)

train_dataloader = dict(batch_size=64)  # two halves of 32
optim_wrapper = dict(
    constructor='ArchWeightOptimWrapperConstructor',
    architecture=dict(
        optimizer=dict(type='SGD', lr=0.05, momentum=0.9, weight_decay=3e-4),
        clip_grad=dict(max_norm=5.0)),
    mutator=dict(optimizer=dict(type='Adam', lr=3e-3, betas=(0.5, 0.999), weight_decay=1e-3)))
param_scheduler = dict(
    architecture=[dict(type='CosineAnnealingLR', T_max=max_epochs, by_epoch=True, begin=0,
                       end=max_epochs)],
    mutator=[])
train_cfg = dict(by_epoch=True, max_epochs=max_epochs, val_interval=max_epochs)
val_cfg = dict()
test_cfg = dict()
default_hooks = dict(checkpoint=dict(interval=max_epochs))
custom_hooks = [dict(type='DumpSubnetHook')]  # subnet_latest/final.yaml: the argmax subnet
