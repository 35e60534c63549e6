"""Gather with a 0-d index from a Constant node on a 1-D tensor gives a 0-d result.

The TorchScript exporter writes ``x.view(x.size(0), -1)`` under a dynamic batch axis as
Shape -> Gather(Constant 0-d index) -> Unsqueeze -> Concat -> Reshape; the index is no
parameter (a Constant node writes it), so the kernel's general path runs, which once
reshaped with ``reshape(*shape)`` and an empty shape: a TypeError.  Transpose without
``perm`` permuted a 0-d tensor the same way.
"""
import io

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper

from razorlib.ir import TorchExecutor, from_onnx
from razorlib.quantization import QuantExecutor, quantize_onnx_model


class _ViewHead(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.fc = torch.nn.Linear(4 * 6 * 6, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.conv(x).view(x.size(0), -1))


def _exported_view_model() -> onnx.ModelProto:
    torch.manual_seed(0)
    buffer = io.BytesIO()
    torch.onnx.export(_ViewHead().eval(), (torch.randn(2, 3, 8, 8),), buffer, dynamo=False,
                      input_names=['x'], dynamic_axes={'x': {0: 'N'}})
    return onnx.load_from_string(buffer.getvalue())


def _shape_gather_model(index: int) -> onnx.ModelProto:
    """``x`` (N, 3, 4) read back as (x.shape[index], -1), and the 0-d size itself."""
    nodes = [
        helper.make_node('Shape', ['x'], ['shape']),
        helper.make_node('Constant', [], ['index'],
                         value=helper.make_tensor('index', TensorProto.INT64, [], [index])),
        helper.make_node('Gather', ['shape', 'index'], ['size'], axis=0),
        helper.make_node('Unsqueeze', ['size', 'zero'], ['size_1d']),
        helper.make_node('Concat', ['size_1d', 'rest'], ['new_shape'], axis=0),
        helper.make_node('Reshape', ['x', 'new_shape'], ['y']),
    ]
    constants = [helper.make_tensor('zero', TensorProto.INT64, [1], [0]),
                 helper.make_tensor('rest', TensorProto.INT64, [1], [-1])]
    graph = helper.make_graph(
        nodes, 'shape_gather',
        [helper.make_tensor_value_info('x', TensorProto.FLOAT, ['N', 3, 4])],
        [helper.make_tensor_value_info('y', TensorProto.FLOAT, None),
         helper.make_tensor_value_info('size', TensorProto.INT64, [])], constants)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid('', 13)])


def _onnxruntime(model: onnx.ModelProto, x: torch.Tensor):
    session = ort.InferenceSession(model.SerializeToString(), providers=['CPUExecutionProvider'])
    return session.run(None, {session.get_inputs()[0].name: x.numpy()})


def _assert_matches_onnxruntime(model: onnx.ModelProto, x: torch.Tensor) -> None:
    got = TorchExecutor(from_onnx(model))(x)
    expected = _onnxruntime(model, x)
    assert len(got) == len(expected)
    for tensor, reference in zip(got, expected):
        assert tensor.shape == reference.shape and tensor.numpy().dtype == reference.dtype
        np.testing.assert_allclose(tensor.numpy(), reference, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('batch', [2, 3])
def test_exported_view_runs_like_onnxruntime(batch):
    model = _exported_view_model()
    assert any(node.op_type == 'Gather' for node in model.graph.node)
    _assert_matches_onnxruntime(model, torch.randn(batch, 3, 8, 8))


@pytest.mark.parametrize('index', [0, -3, 2])
def test_constant_scalar_index_on_shape(index):
    x = torch.randn(2, 3, 4)
    _assert_matches_onnxruntime(_shape_gather_model(index), x)
    size = TorchExecutor(from_onnx(_shape_gather_model(index)))(x)[1]
    assert size.dim() == 0 and int(size) == x.shape[index]


def test_quantize_onnx_model_with_scalar_gather():
    model = _exported_view_model()
    batches = [torch.randn(2, 3, 8, 8) for _ in range(2)]
    graph = quantize_onnx_model(model, batches, platform='ORT_INT8', progress=False)
    x = torch.randn(3, 3, 8, 8)
    (got, ) = QuantExecutor(graph)(x)
    (expected, ) = _onnxruntime(model, x)
    assert got.shape == expected.shape and torch.isfinite(got).all()
    error = (got - torch.from_numpy(expected)).norm() / np.linalg.norm(expected)
    assert error < 0.1


def test_transpose_without_perm_of_a_scalar():
    graph = helper.make_graph([helper.make_node('Transpose', ['x'], ['y'])], 'transpose',
                              [helper.make_tensor_value_info('x', TensorProto.FLOAT, [])],
                              [helper.make_tensor_value_info('y', TensorProto.FLOAT, [])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 13)])
    _assert_matches_onnxruntime(model, torch.tensor(2.5))
