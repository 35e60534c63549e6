# Retrain a searched subnet of the digits supernet from scratch, as a plain slim model.
#   python tools/train.py configs/pruning/autoslim/autoslim_plaincnn_digits_subnet_retrain.py \
#       --cfg-options model.channel_cfg=work_dirs/<search>/<subnet>.yaml
# To fine-tune the pruned weights of tools/prune.py instead, add load_from=<.../slim.pth>.
_base_ = [
    '../../_base_/models/plaincnn_digits.py',
    '../../_base_/datasets/digits.py',
    '../../_base_/schedules/sgd_cosine_30e.py',
    '../../_base_/default_runtime.py',
]

model = dict(
    _delete_=True,
    type='sub_model',
    architecture=_base_.model,
    channel_cfg='work_dirs/autoslim_plaincnn_digits_search/subnet.yaml')
