# Fine-tune a subnet sliced out of the trained digits supernet (tools/prune.py's slim.pth):
# a short, low learning-rate schedule on the inherited weights.
#   python tools/train.py configs/pruning/autoslim/autoslim_plaincnn_digits_subnet_finetune.py \
#       --cfg-options model.channel_cfg=<.../channel_cfg.yaml> load_from=<.../slim.pth>
_base_ = ['./autoslim_plaincnn_digits_subnet_retrain.py']

max_epochs = 10
optim_wrapper = dict(optimizer=dict(lr=0.02))
param_scheduler = [
    dict(type='CosineAnnealingLR', T_max=max_epochs, by_epoch=True, begin=0, end=max_epochs)
]
train_cfg = dict(max_epochs=max_epochs, val_interval=max_epochs)
default_hooks = dict(checkpoint=dict(interval=max_epochs))
