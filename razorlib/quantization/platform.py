"""Target platforms (where an operation runs) and export formats (what a graph is written as).

A dispatcher puts every operation of a graph on a platform: a quantized one (the int8
platform the graph is being quantized for), a floating one (FP32, FP16), or SOI for the
shape-or-index subgraphs that compute shapes and indices and are never quantized.
:data:`QUANTIZABLE_OP_TYPES` says which op types each quantized platform runs in int8.
An :class:`ExportFormat` names the files a quantized graph is written to; each quantized
platform has a default one (:data:`DEFAULT_EXPORT_FORMATS`), so a platform's name also
names a format: ``export_graph(graph, path, 'TRT_INT8')``.
"""
import enum
from typing import Any, Dict, FrozenSet, Union

from .op_types import COMPUTE_TYPES, FUSED_ACTIVATION_TYPES, PASSIVE_TYPES, POOLING_TYPES

__all__ = [
    'DEFAULT_EXPORT_FORMATS', 'ExportFormat', 'PlatformKind', 'QUANTIZABLE_OP_TYPES',
    'TargetPlatform', 'as_export_format', 'as_platform', 'is_float_platform',
    'is_quantized_platform'
]


class PlatformKind(enum.Enum):
    """What a :class:`TargetPlatform` stands for.

    Example:
        >>> TargetPlatform.TRT_INT8.kind, TargetPlatform.SOI.kind
        (<PlatformKind.QUANTIZED: 'quantized'>, <PlatformKind.SHAPE_OR_INDEX: 'shape_or_index'>)
    """
    QUANTIZED = 'quantized'
    """Runs quantized operations in int8."""
    FLOATING = 'floating'
    """Runs operations in floating point."""
    SHAPE_OR_INDEX = 'shape_or_index'
    """Computes shapes and indices; never quantized."""
    UNSPECIFIED = 'unspecified'
    """Not dispatched yet."""


class TargetPlatform(enum.Enum):
    """A platform an operation runs on.

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


class ExportFormat(enum.Enum):
    """A file format a quantized graph is written to (an exporter of
    :data:`razorlib.registry.EXPORTERS` is registered under each name).

    Example:
        >>> ExportFormat('QDQ_ONNX') is ExportFormat.QDQ_ONNX
        True
    """
    ONNX = 'ONNX'
    """A plain floating-point ONNX model (quantized parameters dequantized)."""
    QDQ_ONNX = 'QDQ_ONNX'
    """An ONNX model with QuantizeLinear/DequantizeLinear pairs: onnxruntime, TensorRT."""
    TRT_JSON = 'TRT_JSON'
    """A plain ONNX model plus a JSON file of TensorRT dynamic ranges."""


DEFAULT_EXPORT_FORMATS: Dict[TargetPlatform, ExportFormat] = {
    # TensorRT's explicit quantization reads QDQ models; TRT_JSON is its implicit mode.
    TargetPlatform.TRT_INT8: ExportFormat.QDQ_ONNX,
    TargetPlatform.ORT_INT8: ExportFormat.QDQ_ONNX,
}
"""The format a graph quantized for a platform is written in when no format is named."""


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


def as_export_format(value: Union[ExportFormat, TargetPlatform, str],
                     parameter: str = 'format') -> ExportFormat:
    """``value`` as an :class:`ExportFormat`: a format, or a quantized platform (its default).

    Args:
        value: an :class:`ExportFormat`, a quantized :class:`TargetPlatform`, or the name
            of either in any case.
        parameter: the parameter name errors report.

    Raises:
        TypeError: ``value`` is no format, platform or string.
        ValueError: it names neither a format nor a quantized platform; the message lists
            both.

    Example:
        >>> as_export_format('trt_json'), as_export_format('TRT_INT8')
        (<ExportFormat.TRT_JSON: 'TRT_JSON'>, <ExportFormat.QDQ_ONNX: 'QDQ_ONNX'>)
    """
    if isinstance(value, ExportFormat):
        return value
    if isinstance(value, str) and value.upper() in ExportFormat.__members__:
        return ExportFormat[value.upper()]
    if isinstance(value, (str, TargetPlatform)):
        platform = TargetPlatform.__members__.get(value.upper()) if isinstance(value, str) \
            else value
        if platform in DEFAULT_EXPORT_FORMATS:
            return DEFAULT_EXPORT_FORMATS[platform]
        formats = ', '.join(ExportFormat.__members__)
        platforms = ', '.join(member.name for member in DEFAULT_EXPORT_FORMATS)
        raise ValueError(f'{parameter}: {getattr(value, "name", value)!r} is no export format '
                         f'({formats}) and no quantized platform ({platforms}, which name '
                         'their default format)')
    raise TypeError(f'{parameter} must be an ExportFormat, a TargetPlatform or the name of '
                    f'one, got {type(value).__name__} {value!r}')
