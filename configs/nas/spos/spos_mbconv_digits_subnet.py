# Train a searched MBConv subnet from scratch as a plain ImageClassifier (each block an
# MBConvBlock of its kernel and ratio, skipped blocks gone, no mutable left).
#   python tools/train.py configs/nas/spos/spos_mbconv_digits_subnet.py \
#       --cfg-options model.fix_subnet=work_dirs/spos_mbconv_digits_search/best_subnet.yaml
_base_ = [
    '../_base_/mbconv_digits_space.py',
    '../_base_/digits_nas.py',
    '../../_base_/schedules/sgd_cosine_30e.py',
    '../../_base_/default_runtime.py',
]

max_epochs = 20
model = dict(
    type='nas_subnet',
    architecture=_base_.architecture,
    fix_subnet='work_dirs/spos_mbconv_digits_search/best_subnet.yaml')

optim_wrapper = dict(optimizer=dict(lr=0.1, weight_decay=4e-5))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=50),
    dict(type='CosineAnnealingLR', T_max=max_epochs, by_epoch=True, begin=0, end=max_epochs),
]
train_cfg = dict(max_epochs=max_epochs, val_interval=max_epochs)
default_hooks = dict(checkpoint=dict(interval=max_epochs))
