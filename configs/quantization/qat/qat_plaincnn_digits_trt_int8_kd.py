# Quantization-aware distillation (QAD) of the dense digits CNN for TensorRT INT8: the
# TensorRT QAT config, the fake-quantized model trained to match the FP32 model's logits
# (a frozen copy of the checkpoint: the teacher) rather than the labels alone:
#   python tools/train.py configs/pruning/distill/plaincnn_digits_dense.py
#   python tools/train.py configs/quantization/qat/qat_plaincnn_digits_trt_int8_kd.py
# loss_kd = kd_weight * T^2 * KL(FP32 || INT8 at temperature T) (with loss='mse': kd_weight
# times the logits' mean squared error, T left at 1); label_weight > 0 adds the labels'
# cross-entropy (loss_ce).  Checkpoints hold the INT8 model only.
_base_ = ['./qat_plaincnn_digits_trt_int8.py']

model = dict(distill=dict(temperature=1.0, kd_weight=1.0, label_weight=0.0))
