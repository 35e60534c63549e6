# AutoSlim's ImageNet schedule: 300 epochs, SGD at lr 0.8 for a total batch of 1024,
# linear (power 1) decay to 0, no weight decay on norms and biases.
max_epochs = 300
optim_wrapper = dict(
    optimizer=dict(type='SGD', lr=0.8, momentum=0.9, weight_decay=4e-5, nesterov=True),
    paramwise_cfg=dict(bias_decay_mult=0.0, norm_decay_mult=0.0))
param_scheduler = dict(type='PolyLR', power=1.0, eta_min=0.0, by_epoch=True, begin=0,
                       end=max_epochs, convert_to_iter_based=True)
train_cfg = dict(by_epoch=True, max_epochs=max_epochs, val_interval=5)
val_cfg = dict()
test_cfg = dict()
# lr 0.8 is for 8 processes x 128 images; `--cfg-options auto_scale_lr.enable=True`
# rescales it to the actual total batch size.
auto_scale_lr = dict(enable=False, base_batch_size=1024)
