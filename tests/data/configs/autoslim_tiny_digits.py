# The digits supernet config shrunk for tests: two narrow layers, one epoch, 64 a batch.
_base_ = ['../../../configs/pruning/autoslim/autoslim_plaincnn_digits_supernet.py']

model = dict(architecture=dict(backbone=dict(channels=(8, 16), strides=(1, 2))))
train_dataloader = dict(batch_size=64)
train_cfg = dict(max_epochs=1, val_interval=1)
default_hooks = dict(logger=dict(interval=10))
