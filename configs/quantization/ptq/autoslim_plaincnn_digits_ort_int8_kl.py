# Post-training INT8 quantization of the digits AutoSlim supernet for onnxruntime, with
# entropy (KL) calibration of the activations:
#   python tools/ptq.py configs/quantization/ptq/autoslim_plaincnn_digits_ort_int8_kl.py \
#       work_dirs/autoslim_plaincnn_digits_supernet/epoch_30.pth
_base_ = ['./autoslim_plaincnn_digits_trt_int8.py']

ptq = dict(
    platform='ORT_INT8',  # uint8 activations, int8 weights, int32 biases
    observer=dict(_delete_=True, type='kl'),
    export=dict(type='QDQ_ONNX'),
)
