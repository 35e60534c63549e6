"""Linear quantization arithmetic: rounding policies, quantize-dequantize of a tensor, and
the same driven by a :class:`~razorlib.ir.TensorQuantizationConfig`.

The arithmetic follows ONNX's QuantizeLinear/DequantizeLinear: ``x / scale`` in the
tensor's float type, rounded (half to even by default), plus the zero point, saturated to
the integer range; back with ``(q - zero_point) * scale``.  Running the two in float32 gives
the numbers onnxruntime's QDQ kernels give, bit for bit.
"""
from typing import Callable, Dict, Tuple, Union

import torch

from ..ir import QuantizationProperty, RoundingPolicy, TensorQuantizationConfig

__all__ = ['ROUNDING_FUNCTIONS', 'config_scale_offset', 'fake_quantize', 'linear_fake_quantize',
           'quantize_integers']

_Rounding = Callable[[torch.Tensor], torch.Tensor]

ROUNDING_FUNCTIONS: Dict[RoundingPolicy, _Rounding] = {
    RoundingPolicy.ROUND_HALF_EVEN: torch.round,
    RoundingPolicy.ROUND_HALF_AWAY_FROM_ZERO: lambda x: torch.sign(x) * torch.floor(x.abs() + 0.5),
    RoundingPolicy.ROUND_HALF_TOWARDS_ZERO: lambda x: torch.sign(x) * torch.ceil(x.abs() - 0.5),
    RoundingPolicy.ROUND_HALF_UP: lambda x: torch.floor(x + 0.5),
    RoundingPolicy.ROUND_HALF_DOWN: lambda x: torch.ceil(x - 0.5),
    RoundingPolicy.ROUND_UP: torch.ceil,
    RoundingPolicy.ROUND_DOWN: torch.floor,
}
"""How each :class:`~razorlib.ir.RoundingPolicy` rounds a tensor to integers."""

_Number = Union[float, torch.Tensor]


def linear_fake_quantize(tensor: torch.Tensor, scale: _Number, offset: _Number, quant_min: int,
                         quant_max: int,
                         rounding: RoundingPolicy = RoundingPolicy.ROUND_HALF_EVEN
                         ) -> torch.Tensor:
    """Quantize to integers in ``[quant_min, quant_max]`` and map back to floating point.

    ``q = clamp(round(x / scale) + offset, quant_min, quant_max)``, then
    ``(q - offset) * scale``.  ``scale`` and ``offset`` broadcast against ``tensor``.

    Args:
        tensor: the values.
        scale: the step between two quantized values.
        offset: the zero point: the integer that stands for 0.0.
        quant_min: the smallest integer.
        quant_max: the largest integer.
        rounding: the rounding policy.

    Returns:
        A tensor like ``tensor`` holding the values the integers stand for.

    Example:
        >>> linear_fake_quantize(torch.tensor([0.26, -0.14, 30.0]), 0.1, 0, -128, 127)
        tensor([ 0.3000, -0.1000, 12.7000])
        >>> linear_fake_quantize(torch.tensor([0.25]), 0.1, 0, -128, 127,
        ...                      RoundingPolicy.ROUND_HALF_UP)
        tensor([0.3000])
    """
    integers = _integers(tensor, scale, offset, quant_min, quant_max, rounding)
    return (integers - offset) * scale


def _integers(tensor: torch.Tensor, scale: _Number, offset: _Number, quant_min: int,
              quant_max: int, rounding: RoundingPolicy) -> torch.Tensor:
    integers = ROUNDING_FUNCTIONS[RoundingPolicy(rounding)](tensor / scale) + offset
    return integers.clamp(quant_min, quant_max)


def config_scale_offset(config: TensorQuantizationConfig,
                        tensor: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """The config's scale and offset, on ``tensor``'s device and dtype, shaped to broadcast.

    A per-channel config's vectors are laid along its ``channel_axis`` of ``tensor``.

    Args:
        config: a config with a scale and an offset.
        tensor: the tensor they are applied to.

    Returns:
        ``(scale, offset)``.

    Raises:
        ValueError: the config has no scale yet (it is not calibrated).

    Example:
        >>> from razorlib.ir import QuantizationProperty as P
        >>> config = TensorQuantizationConfig(P.PER_CHANNEL | P.LINEAR | P.SYMMETRICAL,
        ...                                   channel_axis=1, scale=torch.tensor([1., 2.]),
        ...                                   offset=torch.zeros(2))
        >>> config_scale_offset(config, torch.zeros(4, 2, 3))[0].shape
        torch.Size([1, 2, 1])
    """
    if config.scale is None:
        raise ValueError(f'the config has no scale; calibrate it first: {config!r}')
    scale = config.scale.to(tensor.device, tensor.dtype)
    offset = (config.offset if config.offset is not None else torch.zeros_like(config.scale))
    offset = offset.to(tensor.device, tensor.dtype)
    if QuantizationProperty.PER_CHANNEL in config.policy:
        shape = [1] * tensor.dim()
        shape[config.channel_axis] = -1
        scale, offset = scale.reshape(shape), offset.reshape(shape)
    return scale, offset


def fake_quantize(tensor: torch.Tensor, config: TensorQuantizationConfig) -> torch.Tensor:
    """:func:`linear_fake_quantize` with the scale, offset, range and rounding of ``config``.

    Args:
        tensor: a float tensor.
        config: a calibrated config (it has a scale).

    Returns:
        The quantize-dequantize round trip of ``tensor``.

    Example:
        >>> config = TensorQuantizationConfig(scale=0.1, offset=0.0)
        >>> fake_quantize(torch.tensor([0.26, 30.0]), config)
        tensor([ 0.3000, 12.7000])
    """
    scale, offset = config_scale_offset(config, tensor)
    return linear_fake_quantize(tensor, scale, offset, config.quant_min, config.quant_max,
                                config.rounding)


def quantize_integers(tensor: torch.Tensor, config: TensorQuantizationConfig) -> torch.Tensor:
    """The integers ``config`` quantizes ``tensor`` to, still in ``tensor``'s float type.

    Args:
        tensor: a float tensor.
        config: a calibrated config.

    Returns:
        ``clamp(round(x / scale) + offset, quant_min, quant_max)``.

    Example:
        >>> quantize_integers(torch.tensor([0.26, -30.0]), TensorQuantizationConfig(scale=0.1))
        tensor([   3., -128.])
    """
    scale, offset = config_scale_offset(config, tensor)
    return _integers(tensor, scale, offset, config.quant_min, config.quant_max, config.rounding)
