"""ORTQDQQuantizer: ONNX Runtime's QDQ format, uint8 activations and int8 weights (U8S8)."""
from ..op_types import COMPUTE_TYPES, FUSED_ACTIVATION_TYPES, PASSIVE_TYPES
from ..platform import TargetPlatform
from .base import BaseQuantizer, register_quantizer
from .formats import ScaleSharing, TensorFormat

__all__ = ['ORTQDQQuantizer']


@register_quantizer
class ORTQDQQuantizer(BaseQuantizer):
    """ONNX Runtime int8 through QuantizeLinear/DequantizeLinear pairs.

    - Activations: per-tensor, asymmetric uint8 [0, 255], calibrated by ``minmax``.
    - Weights: per-channel on the output-channel axis, symmetric int8 [-127, 127]; per
      tensor for a grouped ConvTranspose, whose weight has no output-channel axis.
    - Biases of Conv, ConvTranspose and Gemm: int32, symmetric, per channel when the
      weight is; passive: ``master_by`` is the weight config, and the scale is input
      scale x weight scale, as ONNX Runtime's QLinear kernels require.
    - Conv/ConvTranspose/Gemm/MatMul + Relu/Clip are fused.
    - Concat and data-movement ops keep one scale across inputs and outputs, so ONNX
      Runtime can drop the Q/DQ pairs around them; Add inputs keep their own scales.

    Args:
        graph: see :class:`~razorlib.quantization.quantizers.base.BaseQuantizer`.

    Example:
        >>> import torch
        >>> from razorlib.ir import BaseGraph
        >>> graph = BaseGraph()
        >>> x = graph.create_variable('x')
        >>> w = graph.create_variable('w', torch.randn(8, 3, 3, 3), is_parameter=True)
        >>> b = graph.create_variable('b', torch.randn(8), is_parameter=True)
        >>> conv = graph.create_operation('Conv', 'conv', inputs=[x, w, b],
        ...                               outputs=[graph.create_variable()])
        >>> quantizer = ORTQDQQuantizer(graph)
        >>> conv = quantizer.quantize_operation('conv')
        >>> bias = conv.input_quant_config[2]
        >>> bias.num_of_bits, bias.channel_axis, quantizer.link_configs().modified
        (32, 0, True)
        >>> bias.master_by is conv.input_quant_config[1]
        True
    """
    platform = TargetPlatform.ORT_INT8
    activation = TensorFormat(quant_min=0, quant_max=255, symmetric=False)
    weight = TensorFormat(quant_min=-127, per_channel=True)
    bias = TensorFormat(num_of_bits=32, quant_min=-2**31, quant_max=2**31 - 1, per_channel=True)
    fusions = dict.fromkeys(COMPUTE_TYPES, FUSED_ACTIVATION_TYPES)
    shared_scales = {
        **dict.fromkeys(PASSIVE_TYPES, ScaleSharing.INPUTS_AND_OUTPUTS),
        'Concat': ScaleSharing.INPUTS_AND_OUTPUTS,
    }
