# Network slimming of the digits CNN to half its FLOPs: 20 epochs with an L1 penalty on
# the batch-norm scales (sparsity 1e-4), then the channels of smallest |gamma| pruned,
# ranked across all layers (no layer pruned by more than 90%), then 10 epochs of
# fine-tuning without the penalty.
#   python tools/train.py configs/pruning/slimming/slimming_plaincnn_digits.py
_base_ = [
    '../../_base_/models/plaincnn_digits.py',
    '../../_base_/datasets/digits.py',
    '../../_base_/schedules/sgd_cosine_30e.py',
    '../../_base_/default_runtime.py',
]

iters_per_epoch = 45  # 1,437 training images, 32 a batch

model = dict(
    _delete_=True,
    type='SlimmingAlgorithm',
    architecture=_base_.model,
    pruner=dict(type='ImportancePruner', flops=0.5, global_ranking=True, max_ratio=0.9,
                importance=dict(type='bn_scale', normalize='none')),
    sparsity=1e-4,
    prune_at=20 * iters_per_epoch,
    input_shape=(3, _base_.image_size, _base_.image_size))

# the penalty works on the scales: no weight decay on them
optim_wrapper = dict(paramwise_cfg=dict(norm_decay_mult=0.0))

custom_hooks = [
    dict(type='ResourceEstimatorHook'),
    dict(type='SlimExportHook'),
]
