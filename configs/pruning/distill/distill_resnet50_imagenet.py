# Recovery fine-tuning of a slim ResNet-50 (from ite_prune_resnet50_imagenet.py, or any
# pruning config with SlimExportHook) with logit distillation from the dense ResNet-50
# on ImageNet (8 GPUs x 64 images), as mmrazor's SingleTeacherDistill.
#   torchrun --nproc_per_node 8 tools/train.py <this config> --launcher pytorch
_base_ = [
    '../../_base_/models/resnet50_imagenet.py',
    '../../_base_/datasets/imagenet.py',
    '../../_base_/default_runtime.py',
]

pruned = 'work_dirs/ite_prune_resnet50_imagenet'
# the dense teacher: a checkpoint of _base_.model (mmengine's or a state_dict)
teacher_ckpt = 'checkpoints/resnet50_imagenet_dense.pth'
max_epochs = 30

model = dict(
    _delete_=True,
    type='SingleTeacherDistill',
    architecture=dict(type='sub_model', architecture=_base_.model,
                      channel_cfg=pruned + '/slim.yaml'),
    student_ckpt=pruned + '/slim.pth',
    teacher=_base_.model,
    teacher_ckpt=teacher_ckpt,
    temperature=1.0,
    kd_weight=1.0,
    label_weight=1.0,
    input_shape=(3, 224, 224))

optim_wrapper = dict(
    optimizer=dict(type='SGD', lr=0.2, momentum=0.9, weight_decay=1e-4, nesterov=True),
    paramwise_cfg=dict(bias_decay_mult=0.0, norm_decay_mult=0.0))
param_scheduler = dict(type='CosineAnnealingLR', T_max=max_epochs, by_epoch=True, begin=0,
                       end=max_epochs, convert_to_iter_based=True)
train_cfg = dict(by_epoch=True, max_epochs=max_epochs, val_interval=5)
val_cfg = dict()
test_cfg = dict()

custom_hooks = [dict(type='SlimExportHook')]
