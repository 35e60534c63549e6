"""Linear quantization arithmetic: rounding policies and quantize-dequantize of a tensor."""
from typing import Callable, Dict, Union

import torch

from ..ir import RoundingPolicy

__all__ = ['ROUNDING_FUNCTIONS', 'linear_fake_quantize']

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
    integers = ROUNDING_FUNCTIONS[RoundingPolicy(rounding)](tensor / scale) + offset
    return (integers.clamp(quant_min, quant_max) - offset) * scale
