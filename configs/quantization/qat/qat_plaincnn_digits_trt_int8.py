# Quantization-aware training (LSQ: learned scales) of the dense digits CNN for TensorRT
# INT8, started from its post-training quantization:
#   python tools/train.py configs/pruning/distill/plaincnn_digits_dense.py
#   python tools/train.py configs/quantization/qat/qat_plaincnn_digits_trt_int8.py
# The model is quantized as the `quantization` section says (the keys of a PTQ config's
# `ptq` section: razorlib.quantization.PTQSettings), then its weights and scales train;
# validation reports the fake-quantized model's top-1, and QATExportHook writes
# work_dirs/qat_plaincnn_digits_trt_int8/qat_int8.onnx (QDQ: onnxruntime, TensorRT).
_base_ = [
    '../../_base_/models/plaincnn_digits.py',
    '../../_base_/datasets/digits.py',
    '../../_base_/default_runtime.py',
]

max_epochs = 5

model = dict(
    _delete_=True,
    type='QAT',
    architecture=_base_.model,
    checkpoint='work_dirs/plaincnn_digits_dense/epoch_30.pth',  # the trained FP32 model
    # PTQ's calibration images: the training split without augmentation, in a fixed order
    calib_dataloader=dict(
        batch_size=32,
        num_workers=0,
        dataset=dict(type=_base_.dataset_type, split='train', upscale=_base_.image_size),
        sampler=dict(type='DefaultSampler', shuffle=False),
        collate_fn=dict(type='default_collate')),
    quantization=dict(
        platform='TRT_INT8',  # symmetric int8, per-channel weights
        observer=dict(type='mse'),
        calib_steps=16,
        # training starts from the PTQ passes' graph (benchmarks/README.md, PTQ passes run 8:
        # from the calibrated graph at 1e-4 QAT left the INT8 model less like the FP32 one)
        ptq_passes=['LayerwiseEqualization', 'ClipEqualization', 'ActivationCentering',
                    'AdaRound', 'BiasCorrection'],
        export=dict(type='QDQ_ONNX')))

# a short, low learning-rate schedule annealed to 0: the weights move little; the scales
# (learned as logarithms) take a 100 times larger rate
optim_wrapper = dict(
    optimizer=dict(type='Adam', lr=1e-5, weight_decay=0.0),
    paramwise_cfg=dict(custom_keys={'quantized.scales': dict(lr_mult=100.0)}))
param_scheduler = [
    dict(type='CosineAnnealingLR', T_max=max_epochs, by_epoch=True, begin=0, end=max_epochs)
]
train_cfg = dict(by_epoch=True, max_epochs=max_epochs, val_interval=1)
val_cfg = dict()
test_cfg = dict()
default_hooks = dict(checkpoint=dict(interval=max_epochs))

custom_hooks = [dict(type='QATExportHook')]  # qat_int8.onnx after training
