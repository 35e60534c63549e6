# Post-training INT8 quantization of the digits AutoSlim supernet for TensorRT:
#   python tools/ptq.py configs/quantization/ptq/autoslim_plaincnn_digits_trt_int8.py \
#       work_dirs/autoslim_plaincnn_digits_supernet/epoch_30.pth [--subnet SUBNET_YAML]
# The model and its dataloaders come from the supernet's config; `ptq` says how to
# quantize (razorlib.quantization.PTQSettings: the arguments of quantize_torch_model),
# `calib_dataloader` what to calibrate on.  Options of tools/ptq.py override `ptq`.
_base_ = ['../../pruning/autoslim/autoslim_plaincnn_digits_supernet.py']

ptq = dict(
    platform='TRT_INT8',  # symmetric int8, per-channel weights
    observer=dict(type='PercentileObserver', percentile=99.99),  # activations
    dispatcher=dict(type='ConservativeDispatcher'),
    calib_steps=32,
    dynamic_batch=True,  # the ONNX model takes any batch size
    passes=['FormatConstant', 'FormatParameter', 'FuseBatchNorm', 'FuseGemm', 'FuseBiasAdd',
            'FuseLayerNorm', 'FuseGelu', 'DeleteIsolated'],
    export=dict(type='QDQ_ONNX'),  # TensorRT's explicit quantization; 'TRT_JSON': ranges
)

# Calibration images: the training split without augmentation, in a fixed order.
calib_dataloader = dict(
    batch_size=32,
    num_workers=0,
    dataset=dict(type=_base_.dataset_type, split='train', upscale=_base_.image_size),
    sampler=dict(type='DefaultSampler', shuffle=False),
    collate_fn=dict(type='default_collate'))
