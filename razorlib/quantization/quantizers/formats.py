"""The rule data a quantizer declares: tensor formats, scale sharing, weight channel axes.

A quantizer declares one :class:`TensorFormat` for activations, one for weights and one
(or none) for biases, and a :class:`ScaleSharing` per op type whose tensors share one
scale.  :data:`WEIGHT_CHANNEL_AXIS` says, per op type, which axis of the weight holds the
output channels that per-channel quantization follows (none for a grouped ConvTranspose,
whose weight is then per tensor).
"""
import enum
from dataclasses import dataclass
from typing import Callable, Dict, Optional

from ...ir import (Operation, QuantizationProperty, QuantizationStates, RoundingPolicy,
                   TensorQuantizationConfig, Variable)

__all__ = ['GROUPED_CONV_TRANSPOSE_PER_TENSOR', 'ScaleSharing', 'TensorFormat',
           'WEIGHT_CHANNEL_AXIS', 'fp32_config', 'last_axis', 'weight_channel_axis']

_P = QuantizationProperty


@dataclass(frozen=True)
class TensorFormat:
    """How a quantizer quantizes one kind of tensor.

    Args:
        num_of_bits: the bit width.
        quant_min: the smallest integer.
        quant_max: the largest integer.
        symmetric: symmetrical (offset 0) or asymmetrical (min/max mapped to the range).
        per_channel: quantize per channel when the tensor has a known channel axis.
        observer: the observer that calibrates configs of this format.
        rounding: the rounding policy.

    Example:
        >>> weights = TensorFormat(quant_min=-127, per_channel=True)
        >>> config = weights.build(channel_axis=0)
        >>> QuantizationProperty.PER_CHANNEL in config.policy, config.quant_min, config.state.name
        (True, -127, 'INITIAL')
        >>> QuantizationProperty.PER_TENSOR in weights.build(channel_axis=None).policy
        True
    """
    num_of_bits: int = 8
    quant_min: int = -128
    quant_max: int = 127
    symmetric: bool = True
    per_channel: bool = False
    observer: str = 'minmax'
    rounding: RoundingPolicy = RoundingPolicy.ROUND_HALF_EVEN

    def build(self, channel_axis: Optional[int] = None) -> TensorQuantizationConfig:
        """A new INITIAL config of this format.

        Args:
            channel_axis: the tensor's channel axis; None (unknown) gives a per-tensor
                config even for a per-channel format.
        """
        per_channel = self.per_channel and channel_axis is not None
        policy = ((_P.PER_CHANNEL if per_channel else _P.PER_TENSOR) | _P.LINEAR
                  | (_P.SYMMETRICAL if self.symmetric else _P.ASYMMETRICAL))
        return TensorQuantizationConfig(
            policy, self.rounding, self.num_of_bits, self.quant_min, self.quant_max,
            channel_axis=channel_axis if per_channel else None, observer_algorithm=self.observer)


class ScaleSharing(enum.Enum):
    """Which tensors of an op must share one scale.

    Example:
        >>> ScaleSharing('inputs_and_outputs')
        <ScaleSharing.INPUTS_AND_OUTPUTS: 'inputs_and_outputs'>
    """
    INPUTS = 'inputs'
    """The quantized inputs share a scale (an Add whose backend adds in int8)."""
    INPUTS_AND_OUTPUTS = 'inputs_and_outputs'
    """Inputs and outputs share the outputs' scale (Concat, data-movement ops)."""


def fp32_config() -> TensorQuantizationConfig:
    """A config for a tensor that stays in floating point.

    Example:
        >>> fp32_config().state.name
        'FP32'
    """
    return TensorQuantizationConfig(state=QuantizationStates.FP32)


def last_axis(var: Variable) -> Optional[int]:
    """The last axis of a tensor of known rank, else None.

    Example:
        >>> import torch
        >>> last_axis(Variable('w', torch.zeros(16, 8))), last_axis(Variable('x'))
        (1, None)
    """
    return len(var.shape) - 1 if var.shape else None


def _matmul_weight_axis(op: Operation) -> Optional[int]:
    axis = last_axis(op.inputs[1])
    return axis if axis is not None and axis >= 1 else None


GROUPED_CONV_TRANSPOSE_PER_TENSOR = (
    'its weight (in, out / group, k...) has no axis of output channels: output channel c '
    'reads column c % (out / group) of its group\'s rows, so scales on axis 1 would be '
    'shared across groups; its weight and bias are quantized per tensor')
"""Why a grouped ConvTranspose's weight is quantized per tensor (logged per op)."""


def _conv_transpose_weight_axis(op: Operation) -> Optional[int]:
    return 1 if int(op.attributes.get('group', 1)) == 1 else None


WEIGHT_CHANNEL_AXIS: Dict[str, Callable[[Operation], Optional[int]]] = {
    # Conv weights are (out, in / groups, k...); ConvTranspose weights (in, out / groups, k...):
    # grouped, no axis holds the output channels (GROUPED_CONV_TRANSPOSE_PER_TENSOR).
    'Conv': lambda op: 0,
    'ConvTranspose': _conv_transpose_weight_axis,
    # Gemm computes A x B: B is (K, N), or (N, K) with transB.
    'Gemm': lambda op: 0 if op.attributes.get('transB', 0) else 1,
    # MatMul with a weight (..., K, N): the output features are the last axis.
    'MatMul': _matmul_weight_axis,
}
"""Op type -> the axis of input 1 (the weight) that holds the output channels, None where
no axis does (a grouped ConvTranspose: its weight is then quantized per tensor)."""


def weight_channel_axis(op: Operation) -> Optional[int]:
    """The output-channel axis of ``op``'s weight, or None for an op not in the table or one
    whose weight has no such axis (a grouped ConvTranspose).

    Example:
        >>> gemm = Operation('fc', 'Gemm', attributes={'transB': 1})
        >>> weight_channel_axis(gemm), weight_channel_axis(Operation('bn', 'PRelu'))
        (0, None)
        >>> deconv = Operation('up', 'ConvTranspose', attributes={'group': 2})
        >>> weight_channel_axis(deconv), weight_channel_axis(Operation('up', 'ConvTranspose'))
        (None, 1)
    """
    rule = WEIGHT_CHANNEL_AXIS.get(op.type)
    return None if rule is None else rule(op)
