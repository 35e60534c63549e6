# Network slimming of a trained ResNet-50 to half its FLOPs on ImageNet (8 GPUs x 64
# images): 20 epochs of sparsity training (1e-5 on the batch-norm scales), one global
# pruning by |gamma| (widths multiples of 8, no layer pruned by more than 90%), then 10
# epochs of fine-tuning.
#   torchrun --nproc_per_node 8 tools/train.py <this config> --launcher pytorch
_base_ = [
    '../../_base_/models/resnet50_imagenet.py',
    '../../_base_/datasets/imagenet.py',
    '../../_base_/default_runtime.py',
]

# the dense model to prune: a checkpoint of _base_.model (mmengine's or a state_dict)
pretrained = 'checkpoints/resnet50_imagenet_dense.pth'
iters_per_epoch = 1281167 // (8 * 64)
max_epochs = 30

architecture = dict(_base_.model, init_cfg=dict(type='Pretrained', checkpoint=pretrained))

model = dict(
    _delete_=True,
    type='SlimmingAlgorithm',
    architecture=architecture,
    pruner=dict(type='ImportancePruner', flops=0.5, global_ranking=True, max_ratio=0.9,
                round_to=8, importance=dict(type='bn_scale', normalize='none')),
    sparsity=1e-5,
    prune_at=20 * iters_per_epoch,
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
