# SPOS supernet on the digits: SPOS's ShuffleNetV2 choice blocks, one uniformly sampled
# path per step (fair_sampling=True: FairNAS's strict fairness).
#   python tools/train.py configs/nas/spos/spos_shufflenet_digits_supernet.py
#   torchrun --nproc_per_node 2 tools/train.py \
#       configs/nas/spos/spos_shufflenet_digits_supernet.py --launcher pytorch
_base_ = [
    '../_base_/spos_shufflenet_digits_space.py',
    '../_base_/digits_nas.py',
    '../../_base_/schedules/sgd_cosine_30e.py',
    '../../_base_/default_runtime.py',
]

max_epochs = 20
model = dict(
    type='SPOS',
    architecture=_base_.architecture,
    fair_sampling=False,
    input_shape=(3, 16, 16))

# Under --launcher pytorch: DDP that runs SPOS's train_step, with find_unused_parameters
# (a single path leaves the other candidates without gradients).
model_wrapper_cfg = dict(type='razorlib.SPOSDDP')

optim_wrapper = dict(optimizer=dict(lr=0.1, weight_decay=4e-5))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=50),
    dict(type='CosineAnnealingLR', T_max=max_epochs, by_epoch=True, begin=0, end=max_epochs),
]
# Validation during supernet training scores whatever path was sampled last: only once,
# at the end, as a sanity check; the search scores subnets properly.
train_cfg = dict(max_epochs=max_epochs, val_interval=max_epochs)
default_hooks = dict(checkpoint=dict(interval=max_epochs))
