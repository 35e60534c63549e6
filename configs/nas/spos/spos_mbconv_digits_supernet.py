# SPOS supernet of the MobileNet MBConv space on the digits: every block searches its
# kernel (3/5/7) and expand ratio (3/6), all but a stage's first may be skipped; one
# uniformly sampled path per step (kernels and ratios share weights, OFA style).
#   python tools/train.py configs/nas/spos/spos_mbconv_digits_supernet.py
_base_ = [
    '../_base_/mbconv_digits_space.py',
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
# (a skipped block's mbconv gets no gradient and does not move).  The unused kernel ring
# and hidden channels of a block that runs are slices of its shared weight: they get a
# gradient of exactly 0, so SGD's momentum (0.9) and weight decay still move them, as in
# OFA-style weight sharing (docs/nas.md).
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
