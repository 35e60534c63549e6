"""TargetPlatform, its kinds, the export formats, and the helpers that accept names."""
import pytest

from razorlib.ir import UNSPECIFIED_PLATFORM
from razorlib.quantization import (DEFAULT_EXPORT_FORMATS, QUANTIZABLE_OP_TYPES, ExportFormat,
                                   PlatformKind, TargetPlatform, as_export_format, as_platform,
                                   is_float_platform, is_quantized_platform)


def test_every_platform_has_a_kind():
    kinds = {platform.name: platform.kind for platform in TargetPlatform}
    assert kinds == {
        'TRT_INT8': PlatformKind.QUANTIZED, 'ORT_INT8': PlatformKind.QUANTIZED,
        'FP32': PlatformKind.FLOATING, 'FP16': PlatformKind.FLOATING,
        'SOI': PlatformKind.SHAPE_OR_INDEX, 'UNSPECIFIED': PlatformKind.UNSPECIFIED,
    }


def test_operations_default_platform_converts():
    assert TargetPlatform(UNSPECIFIED_PLATFORM) is TargetPlatform.UNSPECIFIED


@pytest.mark.parametrize('helper,true_for', [
    (is_quantized_platform, {'TRT_INT8', 'ORT_INT8'}),
    (is_float_platform, {'FP32', 'FP16'}),
])
def test_helpers_accept_members_and_names(helper, true_for):
    assert {p.name for p in TargetPlatform if helper(p)} == true_for
    assert {p.name for p in TargetPlatform if helper(p.name.lower())} == true_for


def test_as_platform_errors():
    with pytest.raises(TypeError, match='^target must be a TargetPlatform'):
        as_platform(3, parameter='target')
    with pytest.raises(ValueError, match="no platform named 'INT4'; platforms: TRT_INT8, "):
        as_platform('INT4')


def test_every_quantized_platform_lists_its_op_types():
    assert set(QUANTIZABLE_OP_TYPES) == {p for p in TargetPlatform if is_quantized_platform(p)}
    for types in QUANTIZABLE_OP_TYPES.values():
        assert {'Conv', 'Gemm', 'MatMul', 'Concat', 'Relu'} <= types
    assert 'Softmax' not in QUANTIZABLE_OP_TYPES[TargetPlatform.TRT_INT8]


def test_export_formats_are_named_by_themselves_or_by_a_quantized_platform():
    assert {item.name for item in ExportFormat} == {'ONNX', 'QDQ_ONNX', 'TRT_JSON'}
    assert set(DEFAULT_EXPORT_FORMATS) == set(QUANTIZABLE_OP_TYPES)
    assert as_export_format('trt_json') is ExportFormat.TRT_JSON
    assert as_export_format('TRT_INT8') is as_export_format(TargetPlatform.ORT_INT8) \
        is ExportFormat.QDQ_ONNX
    with pytest.raises(ValueError, match="'FP32' is no export format .* and no quantized "
                       'platform'):
        as_export_format('FP32')
    with pytest.raises(TypeError, match='^format must be an ExportFormat'):
        as_export_format(3)
