"""An initializer that is also a graph input is a default: the tensor fed for it counts.

ONNX (IR >= 4) lets a graph input have an initializer, which a feed overrides, and
onnxruntime uses the fed tensor.  Kernels once baked such values in when they were built
(Reshape's shape, Clip's bounds, Gather's scalar index), and fusions folded them (a
BatchNormalization's scale into the Conv weight), so the feed was silently ignored.
"""
import math
import re

import numpy as np
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from razorlib.ir import TorchExecutor, from_onnx, to_onnx
from razorlib.ir.passes import build_pass
from pass_helpers import node

RNG = np.random.default_rng(0)
MERGER_PASSES = ['fuse_bn', 'fuse_gemm', 'fuse_bias_add', 'fuse_layernorm', 'fuse_gelu']


def _case(nodes, x_shape, defaults, fed, opset=13):
    """The model (``defaults`` are initializers, ``fed`` ones graph inputs too) and feeds."""
    inputs = [helper.make_tensor_value_info('x', TensorProto.FLOAT, x_shape)]
    inputs += [helper.make_tensor_value_info(
        name, helper.np_dtype_to_tensor_dtype(defaults[name].dtype), defaults[name].shape)
        for name in fed]
    model = helper.make_model(helper.make_graph(
        nodes, 'defaults', inputs, [helper.make_empty_tensor_value_info('y')],
        [numpy_helper.from_array(value, name) for name, value in defaults.items()]),
        opset_imports=[helper.make_opsetid('', opset)])
    model.ir_version = 8
    return model, {'x': RNG.standard_normal(x_shape).astype(np.float32), **fed}


def _f32(*values):
    return np.array(values, np.float32).reshape(-1 if len(values) > 1 else ())


CASES = {
    'reshape': _case([node('Reshape', ['x', 'shape'], 'y')], [2, 3, 4],
                     {'shape': np.array([6, 4])}, {'shape': np.array([4, 6])}),
    'clip': _case([node('Clip', ['x', 'low', 'high'], 'y')], [2, 3, 4],
                  {'low': _f32(-0.1), 'high': _f32(0.1)}, {'high': _f32(2.0)}),
    'gather': _case([node('Gather', ['x', 'index'], 'y', axis=1)], [2, 3, 4],
                    {'index': np.array(0)}, {'index': np.array(2)}),
    'conv_bn': _case([node('Conv', ['x', 'w'], 'c'),
                      node('BatchNormalization', ['c', 'scale', 'bias', 'mean', 'var'], 'y')],
                     [2, 3, 4, 4], {'w': RNG.standard_normal((3, 3, 1, 1)).astype(np.float32),
                                    'scale': _f32(1, 1, 1), 'bias': _f32(0, 0, 0),
                                    'mean': _f32(0, 0, 0), 'var': _f32(1, 1, 1)},
                     {'scale': _f32(3, 3, 3)}),
    'gelu': _case([node('Div', ['x', 'root2'], 'd'), node('Erf', ['d'], 'e'),
                   node('Add', ['e', 'one'], 'a'), node('Mul', ['x', 'a'], 'm'),
                   node('Mul', ['m', 'half'], 'y')], [2, 3],
                  {'root2': _f32(math.sqrt(2)), 'one': _f32(1.0), 'half': _f32(0.5)},
                  {'half': _f32(2.0)}, opset=20),
}


def _onnxruntime(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=['CPUExecutionProvider'])
    return session.run(None, feeds)[0]


def _tensors(feeds):
    return {name: torch.from_numpy(value) for name, value in feeds.items()}


@pytest.mark.parametrize('name', sorted(CASES))
def test_fed_values_replace_the_defaults_also_after_the_fusions(name):
    model, feeds = CASES[name]
    expected = _onnxruntime(model, feeds)
    graph = from_onnx(model)
    got = TorchExecutor(graph)(_tensors(feeds))[0].numpy()
    assert got.shape == expected.shape and np.abs(got - expected).max() < 1e-5
    for merger in MERGER_PASSES:
        assert build_pass(merger)(graph).changes == 0, merger
    executor = TorchExecutor(graph)
    assert np.abs(executor(_tensors(feeds))[0].numpy() - expected).max() < 1e-5
    executor.tracing_operation_meta(_tensors(feeds))  # the output's type, for the export
    assert np.abs(_onnxruntime(to_onnx(graph), feeds) - expected).max() < 1e-5


def test_a_default_keeps_the_declared_shape_of_its_input():
    # b is declared ['N'] with a default of 3 elements; onnxruntime takes a fed b of 5.
    model = helper.make_model(helper.make_graph(
        [node('Add', ['x', 'b'], 'y')], 'defaults',
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, ['N']) for name in 'xb'],
        [helper.make_tensor_value_info('y', TensorProto.FLOAT, ['N'])],
        [numpy_helper.from_array(_f32(1, 2, 3), 'b')]),
        opset_imports=[helper.make_opsetid('', 13)])
    model.ir_version = 8
    graph = from_onnx(model)
    assert graph.inputs['b'].shape == (3, ) and graph.inputs['b'].fed_shape == ('N', )
    exported = to_onnx(graph)
    declared = exported.graph.input[1].type.tensor_type.shape.dim
    assert [dim.dim_param for dim in declared] == ['N']
    feeds = {'x': np.ones(5, np.float32), 'b': np.arange(5, dtype=np.float32)}
    assert _onnxruntime(exported, feeds).tolist() == [1.0, 2.0, 3.0, 4.0, 5.0]
    # razorlib's executor takes that b too (it checked it against the default's (3,))
    assert TorchExecutor(graph)(_tensors(feeds))[0].tolist() == [1.0, 2.0, 3.0, 4.0, 5.0]


def test_a_default_replaced_by_one_of_another_shape_exports_that_shape():
    model, _ = CASES['reshape']
    graph = from_onnx(model)
    graph.inputs['shape'].value = torch.tensor([2, 3, 4])  # declared (2,), now (3,)
    declared = to_onnx(graph).graph.input[1].type.tensor_type.shape.dim
    assert [dim.dim_value for dim in declared] == [3]


def test_inputs_with_defaults_may_be_left_out_of_a_positional_feed():
    # onnxruntime runs a model whose initializers are also graph inputs (an export with
    # keep_initializers_as_inputs=True) on its data input alone; the executor refused a
    # lone tensor ("graph 'defaults' has 2 inputs ['x', 'scale']; got 1 tensors"), and so
    # did quantize_onnx_model with a dataloader of plain tensors
    model, feeds = CASES['conv_bn']
    graph = from_onnx(model)
    expected = _onnxruntime(model, {'x': feeds['x']})
    x = torch.from_numpy(feeds['x'])
    for inputs in (x, [x], (x, )):
        assert np.abs(TorchExecutor(graph)(inputs)[0].numpy() - expected).max() < 1e-5


def test_an_input_without_default_left_out_is_refused_naming_those_with_defaults():
    model, feeds = CASES['conv_bn']
    graph = from_onnx(model)
    graph.inputs['x'].value = torch.from_numpy(feeds['x'])  # x has a default, scale none
    graph.inputs['scale'].value = None
    with pytest.raises(ValueError, match=re.escape(
            "graph 'defaults' has 2 inputs ['x', 'scale']; got 1 tensors (the inputs ['x'] "
            'have default values and may be left out, after the others)')):
        TorchExecutor(graph)(torch.from_numpy(feeds['x']))
