"""Resize where float32 arithmetic and onnxruntime's shortcuts decide the result: the executor
must pick the very pixels onnxruntime picks (nearest: exact; linear and cubic: 1e-6)."""
import random

import numpy as np
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from razorlib.ir import TorchExecutor, from_onnx

_COORDINATES = ('half_pixel', 'half_pixel_symmetric', 'pytorch_half_pixel', 'align_corners',
                'asymmetric', 'tf_half_pixel_for_nn')
_NEAREST = ('round_prefer_floor', 'round_prefer_ceil', 'floor', 'ceil')


def _resize_model(shape, scales=None, sizes=None, opset=19, **attributes):
    """One Resize of a float input of ``shape``, with constant scales or sizes."""
    initializers, names = [], ['x', '', '', '']
    if scales is not None:
        names[1 if opset < 11 else 2] = 'scales'
        initializers.append(numpy_helper.from_array(np.array(scales, np.float32), 'scales'))
    if sizes is not None:
        names[3] = 'sizes'
        initializers.append(numpy_helper.from_array(np.array(sizes, np.int64), 'sizes'))
    while not names[-1]:
        names.pop()
    node = helper.make_node('Resize', names, ['y'], **attributes)
    graph = helper.make_graph([node], 'resize',
                              [helper.make_tensor_value_info('x', TensorProto.FLOAT, shape)],
                              [helper.make_empty_tensor_value_info('y')],
                              initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', opset)])
    model.ir_version = 8
    return model


def _both(shape, **kwargs):
    """onnxruntime's and the executor's output on ``arange`` input (1-based, so a picked pixel
    shows its index)."""
    model = _resize_model(shape, **kwargs)
    x = np.arange(1, np.prod(shape) + 1, dtype=np.float32).reshape(shape)
    expected = ort.InferenceSession(model.SerializeToString(),
                                    providers=['CPUExecutionProvider']).run(None, {'x': x})[0]
    return TorchExecutor(from_onnx(model))(torch.from_numpy(x))[0].numpy(), expected


def _assert_matches(got, expected, mode, context=''):
    """Nearest picks the same pixels; linear and cubic weigh them alike within 1e-6."""
    assert got.shape == expected.shape, context
    if mode == 'nearest':
        np.testing.assert_array_equal(got, expected, err_msg=str(context))
    else:
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6, err_msg=str(context))


@pytest.mark.parametrize('size, scale, out', [(3, 5 / 3, 5), (3, 7 / 3, 7), (3, 10 / 3, 10)])
def test_output_size_from_scales_is_a_float32_product(size, scale, out):
    # float32(5 / 3) = 1.6666666: 3 times it is 4.9999998 in float64 (the ONNX reference: 4)
    # and 5.0 in float32 (onnxruntime: 5).
    assert int(float(np.float32(scale)) * size) == out - 1
    got, expected = _both([1, 1, 1, size], scales=[1, 1, 1, scale], mode='nearest')
    assert expected.shape == (1, 1, 1, out)
    _assert_matches(got, expected, 'nearest')


def test_aspect_ratio_policy_rounds_half_away_from_zero():
    # Sizes (1, 5) of a 4 x 2 input, not larger: scale 1/4, so the width is round(0.5) = 1
    # (std::round), not 0 (Python's round to even).
    got, expected = _both([1, 1, 4, 2], sizes=[1, 5], axes=[2, 3],
                          keep_aspect_ratio_policy='not_larger', mode='nearest')
    assert expected.shape == (1, 1, 1, 1)
    _assert_matches(got, expected, 'nearest')


@pytest.mark.parametrize('mode, nearest_mode', [
    ('nearest', 'round_prefer_ceil'), ('nearest', 'ceil'), ('nearest', 'round_prefer_floor'),
    ('linear', None), ('cubic', None)])
def test_axis_of_scale_one_is_copied_in_tf_half_pixel_for_nn(mode, nearest_mode):
    # The width keeps scale 1.  (x + 0.5) / 1 would shift it by half a pixel (ceil: columns
    # 1, 2, 3, 4, 4); onnxruntime copies an axis of scale 1 whatever the coordinate mode.
    attributes = {'nearest_mode': nearest_mode} if nearest_mode else {}
    got, expected = _both([1, 1, 4, 5], scales=[1, 1, 2, 1], opset=13, mode=mode,
                          coordinate_transformation_mode='tf_half_pixel_for_nn', **attributes)
    _assert_matches(got, expected, mode)
    np.testing.assert_allclose(np.diff(got[0, 0], axis=1), 1, rtol=0, atol=1e-5)


def test_unchanged_shape_is_a_copy_even_at_a_scale_above_one():
    # 3 * 1.1 and 5 * 1.1 truncate to 3 and 5: onnxruntime returns the input as it is.
    got, expected = _both([1, 1, 3, 5], scales=[1, 1, 1.1, 1.1], mode='linear')
    _assert_matches(got, expected, 'linear')
    np.testing.assert_array_equal(got.ravel(), np.arange(1, 16, dtype=np.float32))


def test_half_pixel_symmetric_offset_in_float32_rest_in_float64():
    # 3 -> 1: the coordinate is 1 exactly; onnxruntime gets 0.99999994 and floors it to
    # pixel 0 (value 1), where float32 throughout gets 1.0 (pixel 1, value 2).
    got, expected = _both([1, 1, 1, 3], sizes=[1, 1, 1, 1], mode='nearest',
                          coordinate_transformation_mode='half_pixel_symmetric',
                          nearest_mode='floor')
    _assert_matches(got, expected, 'nearest')
    assert got.ravel().tolist() == [1]


@pytest.mark.parametrize('nearest_mode', _NEAREST)
def test_half_pixel_symmetric_matches_onnxruntime_on_a_sweep(nearest_mode):
    for size in range(2, 10):
        for out in range(1, 14):
            for kwargs in ({'sizes': [1, 1, 1, out]}, {'scales': [1, 1, 1, out / size * 1.03]}):
                got, expected = _both([1, 1, 1, size], mode='nearest', nearest_mode=nearest_mode,
                                      coordinate_transformation_mode='half_pixel_symmetric',
                                      **kwargs)
                _assert_matches(got, expected, 'nearest', context=(size, kwargs))


def test_opset_10_nearest_rounds_up_when_shrinking():
    # Resize-10 has no nearest_mode: onnxruntime takes ceil(x / scale) when shrinking, so
    # 3 -> 2 (scale 2/3) picks pixels 0 and ceil(1.5) = 2, i.e. values 1 and 3.
    got, expected = _both([1, 1, 1, 3], scales=[1, 1, 1, 2 / 3], mode='nearest', opset=10)
    _assert_matches(got, expected, 'nearest')
    assert got.ravel().tolist() == [1, 3]


def _random_case(rng):
    size, mode = rng.randint(1, 12), rng.choice(['nearest', 'nearest', 'linear', 'cubic'])
    height, out, out_height = rng.randint(1, 5), rng.randint(1, 25), rng.randint(1, 8)
    attributes = {'mode': mode, 'coordinate_transformation_mode': rng.choice(_COORDINATES)}
    if mode == 'nearest':
        attributes['nearest_mode'] = rng.choice(_NEAREST)
    sizing = rng.choice(['scales', 'sizes', 'policy'])
    if sizing == 'scales':
        scale = rng.choice([out / size, out / size * rng.uniform(0.95, 1.05), 1.0])
        return [1, 1, height, size], dict(scales=[1, 1, out_height / height, scale], **attributes)
    if sizing == 'sizes':
        return [1, 1, height, size], dict(sizes=[1, 1, out_height, out], **attributes)
    policy = rng.choice(['not_larger', 'not_smaller'])
    return [1, 1, height, size], dict(sizes=[out_height, out], axes=[2, 3],
                                      keep_aspect_ratio_policy=policy, **attributes)


@pytest.mark.parametrize('seed', range(4))
def test_random_resizes_match_onnxruntime(seed):
    rng = random.Random(seed)
    for _ in range(60):
        shape, kwargs = _random_case(rng)
        _assert_matches(*_both(shape, **kwargs), kwargs['mode'], context=(shape, kwargs))
