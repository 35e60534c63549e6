# GroupFisher pruning of the digits CNN to half its FLOPs: 5 epochs of dense training,
# then the Fisher information of channel masks is accumulated and every 5 iterations
# the channel with the least Fisher per FLOP it costs is pruned, until the target; the
# rest of the 30 epochs fine-tunes.
#   python tools/train.py configs/pruning/group_fisher/group_fisher_plaincnn_digits.py
_base_ = [
    '../../_base_/models/plaincnn_digits.py',
    '../../_base_/datasets/digits.py',
    '../../_base_/schedules/sgd_cosine_30e.py',
    '../../_base_/default_runtime.py',
]

iters_per_epoch = 45  # 1,437 training images, 32 a batch

model = dict(
    _delete_=True,
    type='GroupFisherAlgorithm',
    architecture=_base_.model,
    # normalize_by='memory' divides by the activation memory a channel takes instead
    pruner=dict(type='ImportancePruner', flops=0.5,
                importance=dict(type='fisher', normalize_by='flops')),
    interval=5,
    start=5 * iters_per_epoch,
    input_shape=(3, _base_.image_size, _base_.image_size))

custom_hooks = [
    dict(type='ResourceEstimatorHook'),
    dict(type='SlimExportHook'),
]
