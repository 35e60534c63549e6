"""ReduceMean over the spatial axes becomes GlobalAveragePool, so dynamo-exported heads quantize.

The dynamo exporter writes AdaptiveAvgPool2d(1) and ``x.mean((2, 3))`` as ReduceMean, the
TorchScript exporter as GlobalAveragePool; ReduceMeanToGlobalPool makes the first the
second, exactly, so the conservative dispatcher quantizes the classifier head on ORT_INT8
either way.  The dispatcher logs the quantizable ops it leaves in FP32.
"""
import logging
from typing import List

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from razorlib.ir import PassManager, TorchExecutor, from_onnx, from_torch, to_onnx
from razorlib.ir.passes import ReduceMeanToGlobalPool
from razorlib.quantization import (DEFAULT_PASSES, dispatch_graph, prepare_graph,
                                   quantize_onnx_model, quantize_torch_model)

PASSES = (*DEFAULT_PASSES, 'ReduceMeanToGlobalPool')
"""The graph passes with the rewrite (a second run of it, if the defaults hold it, is a no-op)."""
DISPATCH_LOGGER = 'razorlib.quantization.dispatch.dispatchers'


def _reduce_mean_model(shape, axes, keepdims, opset, dtype=TensorProto.FLOAT) -> onnx.ModelProto:
    """One ReduceMean: axes as an attribute before opset 18, as an initializer from 18 on."""
    inputs, initializers, attributes = ['x'], [], {'keepdims': keepdims}
    if axes is not None and opset >= 18:
        inputs.append('axes')
        initializers.append(numpy_helper.from_array(np.array(axes, np.int64), 'axes'))
    elif axes is not None:
        attributes['axes'] = list(axes)
    node = helper.make_node('ReduceMean', inputs, ['y'], name='mean', **attributes)
    graph = helper.make_graph([node], 'mean', [helper.make_tensor_value_info('x', dtype, shape)],
                              [helper.make_tensor_value_info('y', dtype, None)], initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid('', opset)])


def _onnxruntime(model: onnx.ModelProto, x: torch.Tensor) -> List[torch.Tensor]:
    session = ort.InferenceSession(model.SerializeToString(), providers=['CPUExecutionProvider'])
    feeds = {session.get_inputs()[0].name: x.numpy()}
    return [torch.from_numpy(array) for array in session.run(None, feeds)]


def _rewritten(model: onnx.ModelProto, x: torch.Tensor):
    """The graph of ``model`` with shapes recorded, the pass's changes, the outputs before."""
    graph = from_onnx(model)
    TorchExecutor(graph).tracing_operation_meta(x)
    expected = TorchExecutor(graph)(x)
    return graph, ReduceMeanToGlobalPool()(graph).changes, expected


@pytest.mark.parametrize('opset', [13, 18])
@pytest.mark.parametrize('keepdims', [1, 0])
@pytest.mark.parametrize('shape, axes', [
    ((2, 4, 5, 6), (2, 3)), ((2, 4, 5, 6), (-1, -2)), ((2, 4, 7), (2, )),
    ((2, 3, 2, 3, 4), (4, 2, 3))])
def test_spatial_mean_becomes_global_pool(shape, axes, keepdims, opset):
    x = torch.randn(shape)
    graph, changes, expected = _rewritten(_reduce_mean_model(shape, axes, keepdims, opset), x)
    assert changes == 1
    types = [op.type for op in graph.topological_sort()]
    assert types == (['GlobalAveragePool'] if keepdims else ['GlobalAveragePool', 'Flatten'])
    assert [var.name for var in graph.variables.values() if var.is_parameter] == []
    got = TorchExecutor(graph)(x)
    assert torch.equal(got[0], expected[0])
    reference = x.mean(tuple(range(2, len(shape))), keepdim=bool(keepdims))
    torch.testing.assert_close(_onnxruntime(to_onnx(graph), x)[0], reference,
                               rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize('shape, axes, opset', [
    ((2, 4, 5, 6), (1, 2, 3), 13),  # over C too
    ((2, 4, 5, 6), (3, ), 18),  # part of the spatial axes
    ((2, 4, 5, 6), (0, 2, 3), 18),  # over N too
    ((2, 4, 5, 6), None, 18),  # no axes: every axis
    ((2, 4), (1, ), 13),  # no spatial axes
    ((2, 2, 2, 2, 2, 3), (2, 3, 4, 5), 13),  # 4 spatial axes
])
def test_other_means_stay(shape, axes, opset):
    graph, changes, _ = _rewritten(_reduce_mean_model(shape, axes, 1, opset), torch.randn(shape))
    assert changes == 0 and [op.type for op in graph.operations.values()] == ['ReduceMean']


def test_integer_mean_stays():
    """GlobalAveragePool takes floats only (the shapes and dtypes here come from the model)."""
    graph = from_onnx(_reduce_mean_model((2, 4, 5, 6), (2, 3), 1, 13, TensorProto.INT32))
    assert graph.inputs['x'].dtype == torch.int32
    assert ReduceMeanToGlobalPool()(graph).changes == 0


def test_axes_computed_at_run_time_stay():
    nodes = [helper.make_node('Range', ['two', 'four', 'one'], ['axes']),
             helper.make_node('ReduceMean', ['x', 'axes'], ['y'], keepdims=1)]
    scalars = [numpy_helper.from_array(np.array(value, np.int64), name)
               for name, value in (('two', 2), ('four', 4), ('one', 1))]
    graph = helper.make_graph(
        nodes, 'dynamic', [helper.make_tensor_value_info('x', TensorProto.FLOAT, [2, 4, 5, 6])],
        [helper.make_tensor_value_info('y', TensorProto.FLOAT, None)], scalars)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 18)])
    graph, changes, _ = _rewritten(model, torch.randn(2, 4, 5, 6))
    assert changes == 0 and 'ReduceMean' in [op.type for op in graph.operations.values()]


def test_unknown_shape_stays():
    graph = from_onnx(_reduce_mean_model(None, (2, 3), 1, 13))
    assert ReduceMeanToGlobalPool()(graph).changes == 0


class _MeanHead(torch.nn.Module):
    """Conv, ReLU, then ``x.mean((2, 3))`` (no keepdim) and a Linear."""

    def __init__(self) -> None:
        super().__init__()
        self.conv, self.fc = torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.conv(x)).mean((2, 3)))


def _pool_head() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(),
                               torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                               torch.nn.Linear(16, 10))


HEADS = [pytest.param(_pool_head, id='adaptive-pool'), pytest.param(_MeanHead, id='mean')]


def _model(build) -> torch.nn.Module:
    torch.manual_seed(0)
    return build().eval()


@pytest.mark.parametrize('build', HEADS)
def test_dynamo_head_computes_the_same(build):
    net, x = _model(build), torch.randn(4, 3, 8, 8)
    graph = from_torch(net, x, dynamic_batch=True)
    assert 'ReduceMean' in [op.type for op in graph.operations.values()]
    prepare_graph(graph, x, PASSES)
    types = [op.type for op in graph.operations.values()]
    assert 'ReduceMean' not in types and 'GlobalAveragePool' in types
    for images in (x, torch.randn(3, 3, 8, 8)):
        with torch.no_grad():
            expected = net(images)
        torch.testing.assert_close(TorchExecutor(graph)(images)[0], expected,
                                   rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(_onnxruntime(to_onnx(graph), images)[0], expected,
                                   rtol=1e-5, atol=1e-5)


def _platforms(graph) -> dict:
    return {op.type: op.platform.name for op in graph.operations.values()}


@pytest.mark.parametrize('build', HEADS)
def test_ort_int8_quantizes_the_head(build):
    net = _model(build)
    batches = [torch.randn(4, 3, 8, 8) for _ in range(2)]
    graph = quantize_torch_model(net, batches, batches[0], platform='ORT_INT8',
                                 calib_steps=2, progress=False, passes=PASSES)
    assert set(_platforms(graph).values()) == {'ORT_INT8'}


def test_ort_int8_head_as_with_torchscript():
    """The TorchScript exporter writes AdaptiveAvgPool2d(1) as GlobalAveragePool itself."""
    net = _model(_pool_head)
    batches = [torch.randn(4, 3, 8, 8) for _ in range(2)]
    exported = from_torch(net, batches[0], exporter='torchscript', dynamic_batch=True)
    torchscript = quantize_onnx_model(to_onnx(exported), batches, platform='ORT_INT8',
                                      calib_steps=2, progress=False)
    assert set(_platforms(torchscript).values()) == {'ORT_INT8'}


@pytest.mark.parametrize('build', HEADS)
def test_trt_int8_quantizes_the_pool_only(build):
    """GlobalAveragePool is a TensorRT int8 op; the Reshape/Flatten after it is not, so the
    conservative rule keeps the Gemm after it in FP32, with either exporter."""
    net = _model(build)
    batches = [torch.randn(4, 3, 8, 8) for _ in range(2)]
    dynamo = quantize_torch_model(net, batches, batches[0], platform='TRT_INT8',
                                  calib_steps=2, progress=False, passes=PASSES)
    assert _platforms(dynamo) == {'Conv': 'TRT_INT8', 'Relu': 'TRT_INT8',
                                  'GlobalAveragePool': 'TRT_INT8',
                                  dynamo_reshape(dynamo): 'FP32', 'Gemm': 'FP32'}


def dynamo_reshape(graph) -> str:
    """The op the dynamo exporter puts between the pool and the Gemm (Reshape or Flatten)."""
    (found, ) = {op.type for op in graph.operations.values()} & {'Reshape', 'Flatten'}
    return found


def test_dispatch_logs_the_quantizable_ops_left_in_fp32(caplog):
    x = torch.randn(4, 3, 8, 8)
    graph = prepare_graph(from_torch(_model(_pool_head), x), x, passes=())  # ReduceMean stays
    with caplog.at_level(logging.INFO, logger=DISPATCH_LOGGER):
        dispatch_graph(graph, 'ORT_INT8')
    records = [record for record in caplog.records if record.name == DISPATCH_LOGGER]
    assert len(records) == 1
    message = records[0].getMessage()
    assert '2 of 4 op(s)' in message and 'ORT_INT8' in message and 'after a float op' in message
    assert '(Gemm, after Reshape' in message and '(Reshape, after ReduceMean' in message


def test_dispatch_is_quiet_when_nothing_falls_back(caplog):
    x = torch.randn(4, 3, 8, 8)
    graph = prepare_graph(from_torch(_model(_pool_head), x), x, PASSES)
    with caplog.at_level(logging.INFO, logger=DISPATCH_LOGGER):
        dispatch_graph(graph, 'ORT_INT8')
    assert [record for record in caplog.records if record.name == DISPATCH_LOGGER] == []


def test_pass_manager_runs_it_by_alias():
    x = torch.randn(2, 4, 5, 6)
    graph = from_onnx(_reduce_mean_model((2, 4, 5, 6), (2, 3), 0, 18))
    TorchExecutor(graph).tracing_operation_meta(x)
    assert PassManager(['format_constant', 'reduce_mean_to_pool']).call(graph).changes == 1
