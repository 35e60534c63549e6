# Recovery fine-tuning of the slim digits CNN (from ite_prune_plaincnn_digits.py) with
# knowledge distillation from the dense one (plaincnn_digits_dense.py): labels, logits
# at temperature 4 and the last stage's features through a 1x1 conv connector.
#   python tools/train.py configs/pruning/distill/plaincnn_digits_dense.py
#   python tools/train.py configs/pruning/ite_prune/ite_prune_plaincnn_digits.py
#   python tools/train.py configs/pruning/distill/distill_plaincnn_digits.py
_base_ = [
    '../../_base_/models/plaincnn_digits.py',
    '../../_base_/datasets/digits.py',
    '../../_base_/default_runtime.py',
]

pruned = 'work_dirs/ite_prune_plaincnn_digits'
max_epochs = 10

model = dict(
    _delete_=True,
    type='SingleTeacherDistill',
    architecture=dict(type='sub_model', architecture=_base_.model,
                      channel_cfg=pruned + '/slim.yaml'),
    student_ckpt=pruned + '/slim.pth',
    teacher=_base_.model,
    teacher_ckpt='work_dirs/plaincnn_digits_dense/epoch_30.pth',
    temperature=4.0,
    kd_weight=1.0,
    label_weight=1.0,
    features=[dict(student='backbone.stages.3', teacher='backbone.stages.3', weight=1.0)],
    input_shape=(3, _base_.image_size, _base_.image_size))

# a short, low learning-rate schedule on the pruned weights
optim_wrapper = dict(
    optimizer=dict(type='SGD', lr=0.02, momentum=0.9, weight_decay=5e-4, nesterov=True))
param_scheduler = [
    dict(type='CosineAnnealingLR', T_max=max_epochs, by_epoch=True, begin=0, end=max_epochs)
]
train_cfg = dict(by_epoch=True, max_epochs=max_epochs, val_interval=5)
val_cfg = dict()
test_cfg = dict()
default_hooks = dict(checkpoint=dict(interval=max_epochs))

custom_hooks = [dict(type='SlimExportHook')]  # slim.pth: the distilled student
