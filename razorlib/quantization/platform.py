"""Target platforms: where an operation runs (or what a graph is exported to), as one enum.

A dispatcher puts every operation of a graph on a platform: a quantized one (the int8
platform the graph is being quantized for), a floating one (FP32, FP16), or SOI for the
shape-or-index subgraphs that compute shapes and indices and are never quantized.  Export
targets name the files a quantized graph is written to.  :data:`QUANTIZABLE_OP_TYPES` says
which op types each quantized platform runs in int8.
"""
import enum
from typing import Any, Dict, FrozenSet

from .op_types import COMPUTE_TYPES, FUSED_ACTIVATION_TYPES, PASSIVE_TYPES, POOLING_TYPES

__all__ = [
    'PlatformKind', 'QUANTIZABLE_OP_TYPES', 'TargetPlatform', 'as_platform', 'is_export_platform',
    'is_float_platform', 'is_quantized_platform'
]


class PlatformKind(enum.Enum):
    """What a :class:`TargetPlatform` stands for.

    Example:
        >>> TargetPlatform.TRT_INT8.kind, TargetPlatform.QDQ_ONNX.kind
        (<PlatformKind.QUANTIZED: 'quantized'>, <PlatformKind.EXPORT: 'export'>)
    """
    QUANTIZED = 'quantized'
    """Runs quantized operations in int8."""
    FLOATING = 'floating'
    """Runs operations in floating point."""
    SHAPE_OR_INDEX = 'shape_or_index'
    """Computes shapes and indices; never quantized."""
    UNSPECIFIED = 'unspecified'
    """Not dispatched yet."""
    EXPORT = 'export'
    """A file format a quantized graph is exported to, not a place to run an operation."""


class TargetPlatform(enum.Enum):
    """A platform an operation runs on, or an export target.

    Each value is the member's name, so an operation's default platform, the string
    ``'UNSPECIFIED'``, converts with ``TargetPlatform('UNSPECIFIED')``.

    Example:
        >>> TargetPlatform.ORT_INT8.kind.name, TargetPlatform.SOI.kind.name
        ('QUANTIZED', 'SHAPE_OR_INDEX')
        >>> TargetPlatform('UNSPECIFIED') is TargetPlatform.UNSPECIFIED
        True
    """
    TRT_INT8 = 'TRT_INT8'
    """TensorRT int8: symmetric, per-channel weights, per-tensor activations."""
    ORT_INT8 = 'ORT_INT8'
    """ONNX Runtime int8 through QuantizeLinear/DequantizeLinear (QDQ) pairs."""
    FP32 = 'FP32'
    FP16 = 'FP16'
    SOI = 'SOI'
    """Shape or index: operations that compute shapes, indices and other control values."""
    UNSPECIFIED = 'UNSPECIFIED'
    ONNX = 'ONNX'
    """Export target: a plain floating-point ONNX model."""
    QDQ_ONNX = 'QDQ_ONNX'
    """Export target: an ONNX model with QuantizeLinear/DequantizeLinear pairs."""
    TRT_JSON = 'TRT_JSON'
    """Export target: an ONNX model plus a JSON file of TensorRT dynamic ranges."""

    @property
    def kind(self) -> PlatformKind:
        """What the platform stands for (see :class:`PlatformKind`)."""
        return _KINDS[self]


_KINDS: Dict[TargetPlatform, PlatformKind] = {
    TargetPlatform.TRT_INT8: PlatformKind.QUANTIZED,
    TargetPlatform.ORT_INT8: PlatformKind.QUANTIZED,
    TargetPlatform.FP32: PlatformKind.FLOATING,
    TargetPlatform.FP16: PlatformKind.FLOATING,
    TargetPlatform.SOI: PlatformKind.SHAPE_OR_INDEX,
    TargetPlatform.UNSPECIFIED: PlatformKind.UNSPECIFIED,
    TargetPlatform.ONNX: PlatformKind.EXPORT,
    TargetPlatform.QDQ_ONNX: PlatformKind.EXPORT,
    TargetPlatform.TRT_JSON: PlatformKind.EXPORT,
}

QUANTIZABLE_OP_TYPES: Dict[TargetPlatform, FrozenSet[str]] = {
    # TensorRT runs convolutions and matrix products in int8, fuses the activation that
    # follows them, and keeps int8 through residual adds, concatenations and pooling.
    TargetPlatform.TRT_INT8: COMPUTE_TYPES | FUSED_ACTIVATION_TYPES | POOLING_TYPES
    | {'Add', 'Concat'},
    # ONNX Runtime's QDQ kernels: the compute ops, element-wise arithmetic, activations with
    # int8 kernels and the data-movement ops QDQ pairs can be moved through.
    TargetPlatform.ORT_INT8: COMPUTE_TYPES | FUSED_ACTIVATION_TYPES | POOLING_TYPES
    | PASSIVE_TYPES | {'Add', 'Mul', 'Concat', 'Sigmoid', 'LeakyRelu', 'Softmax', 'Where',
                       'InstanceNormalization'},
}
"""Op types each quantized platform runs in int8; dispatchers consult it."""


def as_platform(value: Any, parameter: str = 'platform') -> TargetPlatform:
    """``value`` as a :class:`TargetPlatform`: a member, or a member's name in any case.

    Args:
        value: a :class:`TargetPlatform` or its name.
        parameter: the parameter name errors report.

    Returns:
        The platform.

    Raises:
        TypeError: ``value`` is neither a platform nor a string.
        ValueError: the string names no platform; the message lists the names.

    Example:
        >>> as_platform('trt_int8')
        <TargetPlatform.TRT_INT8: 'TRT_INT8'>
    """
    if isinstance(value, TargetPlatform):
        return value
    if not isinstance(value, str):
        raise TypeError(f'{parameter} must be a TargetPlatform or the name of one, got '
                        f'{type(value).__name__} {value!r}')
    try:
        return TargetPlatform[value.upper()]
    except KeyError:
        names = ', '.join(member.name for member in TargetPlatform)
        raise ValueError(f'{parameter}: no platform named {value!r}; platforms: {names}') from None


def is_quantized_platform(value: Any) -> bool:
    """Whether ``value`` (a platform or its name) runs operations quantized.

    Example:
        >>> is_quantized_platform('ORT_INT8'), is_quantized_platform(TargetPlatform.FP16)
        (True, False)
    """
    return as_platform(value).kind is PlatformKind.QUANTIZED


def is_float_platform(value: Any) -> bool:
    """Whether ``value`` (a platform or its name) runs operations in floating point.

    Example:
        >>> is_float_platform(TargetPlatform.FP16), is_float_platform(TargetPlatform.SOI)
        (True, False)
    """
    return as_platform(value).kind is PlatformKind.FLOATING


def is_export_platform(value: Any) -> bool:
    """Whether ``value`` (a platform or its name) is an export target.

    Example:
        >>> is_export_platform(TargetPlatform.TRT_JSON), is_export_platform('TRT_INT8')
        (True, False)
    """
    return as_platform(value).kind is PlatformKind.EXPORT
