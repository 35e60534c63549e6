"""Every kernel of the executor against onnxruntime, on single-node ONNX models."""
import numpy as np
import onnxruntime as ort
import pytest
import torch

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
