# GroupFisher pruning of a trained ResNet-50 to half its FLOPs on ImageNet (8 GPUs x 64
# images), as mmrazor's group_fisher_resnet50 (75.61% top-1 at 2.06 GFLOPs there): Fisher
# accumulated over 25 iterations, then one group step (8 channels, widths kept
# multiples of 8) pruned, FLOPs-normalised, until the target; then fine-tuning.
#   torchrun --nproc_per_node 8 tools/train.py <this config> --launcher pytorch
_base_ = [
    '../../_base_/models/resnet50_imagenet.py',
    '../../_base_/datasets/imagenet.py',
    '../../_base_/default_runtime.py',
]

# the dense model to prune: a checkpoint of _base_.model (mmengine's or a state_dict)
pretrained = 'checkpoints/resnet50_imagenet_dense.pth'
max_epochs = 40

architecture = dict(_base_.model, init_cfg=dict(type='Pretrained', checkpoint=pretrained))

model = dict(
    _delete_=True,
    type='GroupFisherAlgorithm',
    architecture=architecture,
    pruner=dict(type='ImportancePruner', flops=0.5, round_to=8,
                importance=dict(type='fisher', normalize_by='flops')),
    interval=25,
    input_shape=(3, 224, 224))

optim_wrapper = dict(
    optimizer=dict(type='SGD', lr=0.2, momentum=0.9, weight_decay=1e-4, nesterov=True),
    paramwise_cfg=dict(bias_decay_mult=0.0, norm_decay_mult=0.0))
param_scheduler = dict(type='CosineAnnealingLR', T_max=max_epochs, by_epoch=True, begin=0,
                       end=max_epochs, convert_to_iter_based=True)
train_cfg = dict(by_epoch=True, max_epochs=max_epochs, val_interval=5)
val_cfg = dict()
test_cfg = dict()

custom_hooks = [
    dict(type='ResourceEstimatorHook'),
    dict(type='SlimExportHook'),
]
