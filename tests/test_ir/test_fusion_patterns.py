"""The fusion passes of multi-operation patterns: FuseLayerNorm and FuseGelu."""
import logging
import math

import numpy as np
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper
from torch import nn

from razorlib.ir import from_onnx, from_torch, to_onnx
from pass_helpers import changes, node, onnx_graph, op_types, run_pass

RNG = np.random.default_rng(0)


# LayerNorm.

class HandWrittenLayerNorm(nn.Module):
    def __init__(self, dims, affine, features=8):
        super().__init__()
        self.dims = dims
        self.weight = nn.Parameter(torch.randn(features)) if affine else None
        self.bias = nn.Parameter(torch.randn(features)) if affine else None

    def forward(self, x):
        mean = x.mean(self.dims, keepdim=True)
        centred = x - mean
        out = centred / torch.sqrt(centred.pow(2).mean(self.dims, keepdim=True) + 1e-5)
        return out * self.weight + self.bias if self.weight is not None else out


@pytest.mark.parametrize('dims, affine', [((-1, ), True), ((-2, -1), False), ((2, ), True)])
def test_fuse_layernorm_on_exported_modules(dims, affine):
    x = torch.randn(2, 3, 8)
    graph = from_torch(HandWrittenLayerNorm(dims, affine), x)
    assert len(graph.operations) == 7 + 2 * affine
    assert run_pass(graph, 'fuse_layernorm', [x]) == 1
    (norm, ) = graph.operations.values()
    assert norm.type == 'LayerNormalization' and norm.opset.version == 20
    assert norm.attributes == {'axis': -len(dims), 'epsilon': pytest.approx(1e-5)}
    assert len(norm.inputs) == 2 + affine and norm.inputs[1].shape == x.shape[-len(dims):]


def layernorm_nodes(axes=(-1, ), second_axes=None, epsilon='eps'):
    """ReduceMean .. Div with the axes as attributes (opset 17), then Mul(s) and Add(b)."""
    return [node('ReduceMean', ['x'], 'mean', axes=list(axes)), node('Sub', ['x', 'mean'], 'd'),
            node('Pow', ['d', 'two'], 'd2'),
            node('ReduceMean', ['d2'], 'var', axes=list(second_axes or axes)),
            node('Add', [epsilon, 'var'], 've'), node('Sqrt', ['ve'], 'std'),
            node('Div', ['d', 'std'], 'n'), node('Mul', ['n', 's'], 'scaled'),
            node('Add', ['scaled', 'b'], 'out')]


def layernorm_graph(nodes, x_shape=(2, 4, 6), scale_shape=(6, ), outputs=('out', )):
    constants = {'two': np.float32(2.0), 'eps': np.float32(1e-6),
                 's': RNG.standard_normal(scale_shape).astype(np.float32),
                 'b': RNG.standard_normal(6).astype(np.float32)}
    return onnx_graph(nodes, {'x': list(x_shape)}, {name: None for name in outputs}, constants,
                      opset=17)


def test_fuse_layernorm_with_axes_attributes_and_a_broadcast_scale():
    graph = layernorm_graph(layernorm_nodes(), scale_shape=(1, 1, 1))
    assert run_pass(graph, 'fuse_layernorm') == 1
    (norm, ) = graph.operations.values()
    assert (norm.type, norm.opset.version, norm.outputs[0].name) == ('LayerNormalization', 17,
                                                                     'out')
    assert norm.inputs[1].shape == (6, ) and norm.attributes['epsilon'] == pytest.approx(1e-6)


@pytest.mark.parametrize('case', ['other axes', 'no epsilon', 'inner output', 'scale rows',
                                  'unknown size', 'scale of more dims'])
def test_fuse_layernorm_leaves_what_is_no_layernorm(case):
    nodes = layernorm_nodes(second_axes=(1, ) if case == 'other axes' else None,
                            epsilon='var' if case == 'no epsilon' else 'eps')
    graph = layernorm_graph(nodes, x_shape=(2, 4, 'width') if case == 'unknown size' else
                            (2, 4, 6), scale_shape={'scale rows': (4, 1),
                                                    'scale of more dims': (1, 1, 1, 6)}.get(
                                                        case, (6, )),
                            outputs=('out', 'd') if case == 'inner output' else ('out', ))
    before = op_types(graph)
    fused = run_pass(graph, 'fuse_layernorm', [torch.randn(2, 4, 6)])
    # A scale along other axes, or of more dims than x (it widens the output's rank),
    # stays a Mul after the fused part.
    assert (fused, op_types(graph)) == ((1, ['LayerNormalization', 'Mul', 'Add'])
                                        if case.startswith('scale') else (0, before))


# GELU.

class ErfGelu(nn.Module):
    def forward(self, x):
        return x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))


def test_fuse_gelu_on_an_exported_module():
    x = torch.randn(2, 8)
    graph = from_torch(ErfGelu(), x)
    assert len(graph.operations) == 5
    assert run_pass(graph, 'fuse_gelu', [x]) == 1
    (gelu, ) = graph.operations.values()
    assert (gelu.type, gelu.opset.version, gelu.attributes) == ('Gelu', 20, {})


GELU_TAILS = {
    'x then half': [node('Mul', ['x', 'term'], 'xt'), node('Mul', ['xt', 'half'], 'out')],
    'half then x': [node('Mul', ['half', 'term'], 'ht'), node('Mul', ['x', 'ht'], 'out')],
    'half of x': [node('Mul', ['x', 'half'], 'hx'), node('Mul', ['term', 'hx'], 'out')],
}


def gelu_graph(tail, scaling=('Div', 'root2'), one='one', outputs=('out', )):
    nodes = [node(scaling[0], ['x', scaling[1]], 's'), node('Erf', ['s'], 'e'),
             node('Add', [one, 'e'], 'term'), *GELU_TAILS[tail]]
    return onnx_graph(nodes, {'x': [3, 7]}, {name: None for name in outputs},
                      {'root2': np.float32(math.sqrt(2)), 'halfroot2': np.float32(math.sqrt(0.5)),
                       'one': np.float32(1.0), 'half': np.float32(0.5), 'other': np.float32(1.1)},
                      opset=20)


@pytest.mark.parametrize('tail', sorted(GELU_TAILS))
@pytest.mark.parametrize('scaling', [('Div', 'root2'), ('Mul', 'halfroot2')])
def test_fuse_gelu_takes_every_factor_order(tail, scaling):
    graph = gelu_graph(tail, scaling)
    assert run_pass(graph, 'fuse_gelu') == 1
    assert op_types(graph) == ['Gelu'] and graph.operations['s'].outputs[0].name == 'out'


@pytest.mark.parametrize('case', ['wrong constant', 'wrong scaling', 'inner output'])
def test_fuse_gelu_leaves_what_is_no_gelu(case):
    graph = gelu_graph('x then half', scaling=('Div', 'halfroot2') if case == 'wrong scaling'
                       else ('Div', 'root2'), one='other' if case == 'wrong constant' else 'one',
                       outputs=('out', 'e') if case == 'inner output' else ('out', ))
    assert changes(graph, 'fuse_gelu') == 0 and len(graph.operations) == 5


# The patterns on x, with their constants.

PATTERNS = {
    'fuse_gelu': [node('Div', ['x', 'root2'], 'd'), node('Erf', ['d'], 'e'),
                  node('Add', ['e', 'one'], 'a'), node('Mul', ['x', 'a'], 'm'),
                  node('Mul', ['m', 'half'], 'p')],
    'fuse_layernorm': [node('ReduceMean', ['x'], 'mu', axes=[-1]), node('Sub', ['x', 'mu'], 'd'),
                       node('Pow', ['d', 'two'], 'd2'), node('ReduceMean', ['d2'], 'v', axes=[-1]),
                       node('Add', ['v', 'eps'], 've'), node('Sqrt', ['ve'], 's'),
                       node('Div', ['d', 's'], 'p')],
}
FUSED_OPSETS = {'fuse_gelu': 20, 'fuse_layernorm': 17}
CONSTANTS = {'root2': math.sqrt(2), 'one': 1.0, 'half': 0.5, 'two': 2.0, 'eps': 1e-5}


def pattern_model(pass_name, opset, tail=(), x_shape=(2, 3, 4), shapes=None):
    """The pass's pattern (output 'p', or 'y' of the ``tail`` reading it); its constants
    are 0-d but for those ``shapes`` gives a shape."""
    constants = [numpy_helper.from_array(np.full((shapes or {}).get(name, ()), value,
                                                 np.float32), name)
                 for name, value in CONSTANTS.items()]
    return helper.make_model(helper.make_graph(
        [*PATTERNS[pass_name], *tail], pass_name,
        [helper.make_tensor_value_info('x', TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info('y' if tail else 'p', TensorProto.FLOAT, None)],
        constants), opset_imports=[helper.make_opsetid('', opset)])


def onnxruntime(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=['CPUExecutionProvider'])
    return session.run(None, feeds)[0]


def assert_same_in_onnxruntime(model, graph, x):
    expected = onnxruntime(model, {'x': x})
    got = onnxruntime(to_onnx(graph), {'x': x})
    assert got.shape == expected.shape and np.abs(got - expected).max() < 1e-5


# Fusing into an op newer than the graph's opset.

@pytest.mark.parametrize('pass_name', sorted(PATTERNS))
def test_fusions_leave_a_graph_older_than_their_op(pass_name, caplog):
    # A Gelu (opset 20) or LayerNormalization (17) would have the export import that opset,
    # which redefines the Softmax after it (opset 11 normalizes a 2-D flattening).
    model = pattern_model(pass_name, 11, tail=[node('Softmax', ['p'], 'y')])
    graph = from_onnx(model)
    with caplog.at_level(logging.INFO, logger='razorlib.ir.passes.common'):
        assert changes(graph, pass_name) == 0
    assert 'needs opset' in caplog.text and 'the graph is at opset 11' in caplog.text
    assert_same_in_onnxruntime(model, graph, RNG.standard_normal((2, 3, 4)).astype(np.float32))


# One-element constants of more dims than x.

@pytest.mark.parametrize('shape, fused', [((1, 1, 1), 1), ((1, 1, 1, 1), 0)])
@pytest.mark.parametrize('pass_name, constant', [
    ('fuse_gelu', 'root2'), ('fuse_gelu', 'one'), ('fuse_gelu', 'half'),
    ('fuse_layernorm', 'two'), ('fuse_layernorm', 'eps')])
def test_fusions_take_one_element_constants_of_at_most_x_rank(pass_name, constant, shape, fused):
    # Of shape (1, 1, 1, 1) it broadcasts the (2, 3, 4) output to (1, 2, 3, 4), which the
    # fused op would not.
    model = pattern_model(pass_name, FUSED_OPSETS[pass_name], shapes={constant: shape})
    graph = from_onnx(model)
    assert changes(graph, pass_name) == fused
    assert_same_in_onnxruntime(model, graph, RNG.standard_normal((2, 3, 4)).astype(np.float32))


@pytest.mark.parametrize('shape, fused', [((), 1), ((1, ), 0)])
def test_fuse_gelu_takes_only_0d_constants_when_the_rank_of_x_is_unknown(shape, fused):
    # Fed a 0-d x, a constant of shape (1, ) makes the output (1, ), the Gelu's ().
    model = pattern_model('fuse_gelu', 20, x_shape=None, shapes={'one': shape})
    graph = from_onnx(model)
    assert changes(graph, 'fuse_gelu') == fused
    assert_same_in_onnxruntime(model, graph, np.array(0.7, np.float32))
