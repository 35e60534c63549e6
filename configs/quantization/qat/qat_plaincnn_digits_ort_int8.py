# Quantization-aware training (LSQ) of the dense digits CNN for onnxruntime's QDQ INT8
# (uint8 activations, int32 biases whose scales follow the learned ones):
#   python tools/train.py configs/pruning/distill/plaincnn_digits_dense.py
#   python tools/train.py configs/quantization/qat/qat_plaincnn_digits_ort_int8.py
_base_ = ['./qat_plaincnn_digits_trt_int8.py']

model = dict(quantization=dict(platform='ORT_INT8'))
