# The dense digits CNN, trained for 30 epochs: the teacher of distill_plaincnn_digits.py.
#   python tools/train.py configs/pruning/distill/plaincnn_digits_dense.py
_base_ = [
    '../../_base_/models/plaincnn_digits.py',
    '../../_base_/datasets/digits.py',
    '../../_base_/schedules/sgd_cosine_30e.py',
    '../../_base_/default_runtime.py',
]

default_hooks = dict(checkpoint=dict(interval=30))
