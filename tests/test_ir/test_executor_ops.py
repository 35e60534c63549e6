"""Every kernel of the executor against onnxruntime, on single-node ONNX models."""
import numpy as np
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from op_cases import CASES, single_node_model
from razorlib.ir import TorchExecutor, from_onnx
from razorlib.ir.executor import OP_TABLE


def _variants():
    for op_case in CASES:
        yield pytest.param(op_case, True, id=op_case.id)
        if op_case.control_indices():
            yield pytest.param(op_case, False, id=f'{op_case.id}-dynamic')


@pytest.mark.parametrize('op_case, constant_controls', list(_variants()))
def test_kernel_matches_onnxruntime(op_case, constant_controls):
    model, feeds = single_node_model(op_case, constant_controls)
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=['CPUExecutionProvider'])
    expected = session.run(None, feeds)
    got = TorchExecutor(from_onnx(model))({name: torch.from_numpy(array)
                                           for name, array in feeds.items()})
    assert len(got) == len(expected)
    for tensor, reference in zip(got, expected):
        array = tensor.numpy()
        assert array.dtype == reference.dtype and array.shape == reference.shape
        np.testing.assert_allclose(array, reference, rtol=1e-5, atol=1e-5)


def test_every_kernel_has_a_case():
    assert set(OP_TABLE) - {op_case.op_type for op_case in CASES} == set()


@pytest.mark.parametrize('coordinate, rounding, size, out, expected', [
    ('asymmetric', 'round_prefer_ceil', 7, 4, [0, 2, 4, 5]),  # 2 * 7 / 4 -> 3.4999998: a tie
    ('asymmetric', 'round_prefer_floor', 7, 38, None),  # 19 * 7 / 38 -> 3.5000002: a tie
    ('half_pixel', 'round_prefer_ceil', 20, 6, None),  # 4.5 * 20 / 6 - 0.5 = 14.5
    ('asymmetric', 'round_prefer_ceil', 26, 28, None),  # 21 * 26 / 28 -> 19.499998: 19
    ('asymmetric', 'floor', 14, 2, [0, 6]),  # 1 * 14 / 2 -> 6.9999995: 6
])
def test_resize_nearest_takes_float32_ties_like_onnxruntime(coordinate, rounding, size, out,
                                                            expected):
    # onnxruntime computes the coordinates in float32, and takes one within 1e-6 of n + 0.5
    # as a tie; exact coordinates would differ from it on the last two cases.
    node = helper.make_node('Resize', ['x', '', '', 'sizes'], ['y'], mode='nearest',
                            coordinate_transformation_mode=coordinate, nearest_mode=rounding)
    graph = helper.make_graph(
        [node], 'resize', [helper.make_tensor_value_info('x', TensorProto.FLOAT, [1, 1, 1, size])],
        [helper.make_tensor_value_info('y', TensorProto.FLOAT, [1, 1, 1, out])],
        [numpy_helper.from_array(np.array([1, 1, 1, out]), 'sizes')])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 13)])
    x = np.arange(size, dtype=np.float32).reshape(1, 1, 1, size)
    reference = ort.InferenceSession(model.SerializeToString(),
                                     providers=['CPUExecutionProvider']).run(None, {'x': x})[0]
    got = TorchExecutor(from_onnx(model))(torch.from_numpy(x))[0].numpy()
    np.testing.assert_array_equal(got, reference)
    if expected is not None:
        assert got.ravel().tolist() == expected
