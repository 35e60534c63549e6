# AutoSlim supernet on the offline digits: sandwich rule (max, min and two random
# subnets per step), in-place distillation, widths 2/12 ... 12/12 of every layer.
#   python tools/train.py configs/pruning/autoslim/autoslim_plaincnn_digits_supernet.py
_base_ = [
    '../../_base_/models/plaincnn_digits.py',
    '../../_base_/datasets/digits.py',
    '../../_base_/schedules/sgd_cosine_30e.py',
    '../../_base_/default_runtime.py',
]

# The plain classifier the supernet masks; search and retrain configs reuse it as
# `_base_.architecture`.
architecture = _base_.model

model = dict(
    _delete_=True,
    type='AutoSlim',
    architecture=architecture,
    pruner=dict(type='RatioPruner'),
    num_random_samples=2,
    input_shape=(3, _base_.image_size, _base_.image_size))

# Under --launcher pytorch: DDP whose train_step runs the sandwich rule.  The scope is
# needed: mmengine's Runner looks wrapper types up without the default scope.
model_wrapper_cfg = dict(type='razorlib.AutoSlimDDP')

custom_hooks = [
    dict(type='ResourceEstimatorHook'),  # FLOPs/params next to the val accuracy
    dict(type='DumpSubnetHook'),  # subnet_latest.yaml / subnet_final.yaml in work_dir
]
