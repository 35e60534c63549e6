# Iterative pruning of the digits CNN to half its FLOPs, in one run: 10 epochs of dense
# training, then five pruning steps one epoch apart (L1, one ratio for every group, each
# step to a budget 1/5 closer to the target), then 15 epochs of fine-tuning.
#   python tools/train.py configs/pruning/ite_prune/ite_prune_plaincnn_digits.py
# work_dirs/ite_prune_plaincnn_digits/slim.yaml and slim.pth are the slim model
# (SlimExportHook); distill/distill_plaincnn_digits.py fine-tunes it further.
_base_ = [
    '../../_base_/models/plaincnn_digits.py',
    '../../_base_/datasets/digits.py',
    '../../_base_/schedules/sgd_cosine_30e.py',
    '../../_base_/default_runtime.py',
]

iters_per_epoch = 45  # 1,437 training images, 32 a batch

architecture = _base_.model

model = dict(
    _delete_=True,
    type='ItePruneAlgorithm',
    architecture=architecture,
    pruner=dict(type='ImportancePruner', importance='l1', flops=0.5),
    start=10 * iters_per_epoch,
    step_freq=iters_per_epoch,
    prune_times=5,
    input_shape=(3, _base_.image_size, _base_.image_size))

custom_hooks = [
    dict(type='ResourceEstimatorHook'),  # FLOPs/params of the pruned subnet at each val
    dict(type='SlimExportHook'),  # slim.yaml + slim.pth in work_dir after training
]
