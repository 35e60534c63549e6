"""TensorRTQuantizer: symmetric int8 as TensorRT's explicit (Q/DQ) quantization expects."""
from ..op_types import COMPUTE_TYPES, FUSED_ACTIVATION_TYPES, PASSIVE_TYPES
from ..platform import TargetPlatform
from .base import BaseQuantizer, register_quantizer
from .formats import ScaleSharing, TensorFormat

__all__ = ['TensorRTQuantizer']


@register_quantizer
class TensorRTQuantizer(BaseQuantizer):
    """TensorRT int8: symmetric everywhere, per-channel weights, FP32 biases.

    - Activations: per-tensor, symmetric, [-128, 127], calibrated by ``percentile``.
    - Weights: per-channel on the output-channel axis, symmetric, narrow [-127, 127]
      (TensorRT requires symmetric weight ranges), calibrated by ``minmax``; per tensor
      for a grouped ConvTranspose, whose weight has no output-channel axis.
    - Biases stay FP32: TensorRT takes the float bias and folds it into its int32
      accumulation itself, so no Q/DQ goes on a bias.
    - Conv/ConvTranspose/Gemm/MatMul + Relu/Clip are fused: quantized once, after the
      activation; so is Add + Relu/Clip.
    - A compute op whose only reader is an Add fuses into it (TensorRT's convolution
      with a residual input): the sum, after its fused activation if any, is quantized
      once and the compute op's own output not at all.  The Add's other inputs (the
      residual) stay int8, sharing one scale when several are.
    - Concat and data-movement ops keep one scale across inputs and outputs.

    Args:
        graph: see :class:`~razorlib.quantization.quantizers.base.BaseQuantizer`.

    Example:
        >>> import torch
        >>> from razorlib.ir import BaseGraph
        >>> graph = BaseGraph()
        >>> x = graph.create_variable('x')
        >>> w = graph.create_variable('w', torch.randn(8, 16), is_parameter=True)
        >>> b = graph.create_variable('b', torch.randn(8), is_parameter=True)
        >>> fc = graph.create_operation('Gemm', 'fc', attributes={'transB': 1},
        ...                             inputs=[x, w, b], outputs=[graph.create_variable()])
        >>> fc = TensorRTQuantizer(graph).quantize_operation('fc')
        >>> fc.input_quant_config[1].channel_axis, fc.input_quant_config[2].state.name
        (0, 'FP32')
    """
    platform = TargetPlatform.TRT_INT8
    activation = TensorFormat(observer='percentile')
    weight = TensorFormat(quant_min=-127, per_channel=True)
    bias = None
    fusions = dict.fromkeys(COMPUTE_TYPES | {'Add'}, FUSED_ACTIVATION_TYPES)
    residual_fusions = {'Add': COMPUTE_TYPES}
    shared_scales = {
        **dict.fromkeys(PASSIVE_TYPES, ScaleSharing.INPUTS_AND_OUTPUTS),
        'Concat': ScaleSharing.INPUTS_AND_OUTPUTS,
        'Add': ScaleSharing.INPUTS,
    }
