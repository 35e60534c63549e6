"""The fusion passes FuseBatchNorm, FuseGemm and FuseBiasAdd: each keeps the executor's
outputs (1e-5) and drops the op count."""
import numpy as np
import pytest
import torch
from torch import nn

from razorlib.ir import from_torch
from pass_helpers import changes, node, onnx_graph, op_types, run_pass
from zoo import randomize_norms

RNG = np.random.default_rng(0)


def randn(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# BatchNormalization.

def linear_bn_graph(op_type, x_shape, weight, bias=None, **attributes):
    channels = {'ConvTranspose': weight.shape[1] * attributes.get('group', 1),
                'Gemm': weight.shape[0 if attributes.get('transB') else 1],
                'MatMul': weight.shape[1]}.get(op_type, weight.shape[0])
    constants = {'w': weight, 'gamma': randn(channels), 'beta': randn(channels),
                 'mean': randn(channels),
                 'var': RNG.uniform(0.5, 1.5, channels).astype(np.float32)}
    if bias is not None:
        constants['b'] = bias
    linear_inputs = ['x', 'w'] + (['b'] if bias is not None else [])
    return onnx_graph([node(op_type, linear_inputs, 'y', **attributes),
                       node('BatchNormalization', ['y', 'gamma', 'beta', 'mean', 'var'], 'out',
                            epsilon=1e-3)],
                      {'x': x_shape}, {'out': None}, constants)


@pytest.mark.parametrize('op_type, x_shape, weight, bias, attributes, fused', [
    ('Conv', [2, 3, 6, 6], randn(4, 3, 3, 3), None, dict(pads=[1, 1, 1, 1]), 'Conv'),
    ('Conv', [1, 4, 6, 6], randn(6, 2, 3, 3), randn(6), dict(group=2), 'Conv'),
    ('Conv', [1, 3, 10], randn(5, 3, 3), randn(5), {}, 'Conv'),
    ('ConvTranspose', [1, 4, 5, 5], randn(4, 3, 3, 3), None, dict(group=2, strides=[2, 2]),
     'ConvTranspose'),
    ('ConvTranspose', [1, 2, 4, 4], randn(2, 5, 2, 2), randn(5), {}, 'ConvTranspose'),
    ('Gemm', [3, 5], randn(4, 5), randn(4), dict(transB=1, alpha=2.0, beta=0.5), 'Gemm'),
    ('Gemm', [3, 5], randn(5, 4), None, {}, 'Gemm'),
    ('MatMul', [3, 5], randn(5, 4), None, {}, 'Gemm'),
])
def test_fuse_bn(op_type, x_shape, weight, bias, attributes, fused):
    graph = linear_bn_graph(op_type, x_shape, weight, bias, **attributes)
    assert run_pass(graph, 'fuse_bn') == 1
    assert op_types(graph) == [fused]
    (op, ) = graph.operations.values()
    assert op.name == 'y' and op.outputs[0].name == 'out' and len(op.inputs) == 3
    assert not {'gamma', 'beta', 'mean', 'var'} & set(graph.variables)


@pytest.mark.filterwarnings('ignore::DeprecationWarning')  # the TorchScript exporter's
@pytest.mark.parametrize('module, x', [
    (nn.Sequential(nn.Linear(5, 4), nn.BatchNorm1d(4)), torch.randn(3, 5)),
    (nn.Sequential(nn.ConvTranspose2d(4, 6, 3, groups=2), nn.BatchNorm2d(6)),
     torch.randn(1, 4, 5, 5)),
])
def test_fuse_bn_on_exported_modules(module, x):
    # The TorchScript exporter leaves these BatchNormalizations in the graph.
    graph = from_torch(randomize_norms(module).eval(), x, exporter='torchscript')
    count = len(graph.operations)
    assert run_pass(graph, 'fuse_bn', [x]) == 1
    assert len(graph.operations) == count - 1 and 'BatchNormalization' not in op_types(graph)


def test_fuse_bn_with_a_weight_shared_by_two_convolutions():
    stats = ['g', 'b', 'm', 'v']
    graph = onnx_graph(
        [node('Conv', ['x', 'w'], 'c1'), node('BatchNormalization', ['c1', *stats], 'n1'),
         node('Conv', ['n1', 'w'], 'c2'), node('BatchNormalization', ['c2', *stats], 'out')],
        {'x': [1, 3, 5, 5]}, {'out': None},
        {'w': randn(3, 3, 1, 1),
         **{name: RNG.uniform(0.5, 1.5, 3).astype(np.float32) for name in stats}})
    assert run_pass(graph, 'fuse_bn') == 2
    assert op_types(graph) == ['Conv', 'Conv']
    assert graph.operations['c1'].inputs[1] is not graph.operations['c2'].inputs[1]


@pytest.mark.parametrize('edit', [
    'second reader', 'graph output', 'training mode', 'weight input', 'matmul 3d'])
def test_fuse_bn_leaves_what_it_cannot_fold(edit):
    x_shape = [2, 3, 5] if edit == 'matmul 3d' else [1, 3, 4, 4]
    weight = randn(5, 4) if edit == 'matmul 3d' else randn(4, 3, 1, 1)
    graph = linear_bn_graph('MatMul' if edit == 'matmul 3d' else 'Conv', x_shape, weight)
    y, bn = graph.variables['y'], graph.operations['out']
    if edit == 'second reader':
        graph.create_operation('Relu', inputs=[y], outputs=[graph.create_variable('extra')])
    elif edit == 'graph output':
        graph.mark_variable_as_graph_output(y)
    elif edit == 'training mode':
        bn.attributes['training_mode'] = 1
    elif edit == 'weight input':
        graph.mark_variable_as_graph_input(graph.variables['w'])
        graph.variables['w'].is_parameter = False
    before = op_types(graph)
    assert changes(graph, 'fuse_bn') == 0
    assert op_types(graph) == before
    graph.check()


# MatMul + Add -> Gemm.

@pytest.mark.parametrize('bias, bias_first', [
    (randn(4), False), (randn(1, 4), True), (np.float32(0.5), False)])
def test_fuse_gemm(bias, bias_first):
    add_inputs = ['b', 'y'] if bias_first else ['y', 'b']
    graph = onnx_graph([node('MatMul', ['x', 'w'], 'y'), node('Add', add_inputs, 'out')],
                       {'x': [3, 5]}, {'out': None}, {'w': randn(5, 4), 'b': bias})
    assert run_pass(graph, 'fuse_gemm') == 1
    assert op_types(graph) == ['Gemm']
    assert [var.name for var in graph.operations['y'].inputs] == ['x', 'w', 'b']


class MatMulAdd(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(8, 6))
        self.bias = nn.Parameter(torch.randn(6))

    def forward(self, x):
        return x @ self.weight + self.bias


@pytest.mark.parametrize('x, fused', [(torch.randn(2, 8), 1), (torch.randn(2, 3, 8), 0)])
def test_fuse_gemm_only_on_2d_inputs(x, fused):
    graph = from_torch(MatMulAdd(), x)
    assert op_types(graph) == ['MatMul', 'Add']
    assert run_pass(graph, 'fuse_gemm', [x]) == fused
    assert op_types(graph) == (['Gemm'] if fused else ['MatMul', 'Add'])


@pytest.mark.parametrize('bias', [randn(3, 4), randn(1, 1, 4), randn(5)])
def test_fuse_gemm_leaves_biases_gemm_cannot_broadcast(bias):
    graph = onnx_graph([node('MatMul', ['x', 'w'], 'y'), node('Add', ['y', 'b'], 'out')],
                       {'x': [3, 5]}, {'out': None}, {'w': randn(5, 4), 'b': bias})
    assert changes(graph, 'fuse_gemm') == 0 and op_types(graph) == ['MatMul', 'Add']


# Linear + Add of a per-channel constant.

@pytest.mark.parametrize('op_type, x_shape, weight, bias, addend, attributes', [
    ('Conv', [1, 3, 5, 5], randn(4, 3, 3, 3), None, randn(1, 4, 1, 1), {}),
    ('Conv', [1, 3, 5, 5], randn(4, 3, 3, 3), randn(4), randn(4, 1, 1), {}),
    ('Conv', [1, 3, 5, 5], randn(4, 3, 3, 3), None, np.float32(0.25), {}),
    ('ConvTranspose', [1, 3, 4, 4], randn(3, 2, 3, 3), None, randn(2, 1, 1), {}),
    ('Gemm', [2, 5], randn(4, 5), randn(4), randn(4), dict(transB=1, beta=2.0)),
])
def test_fuse_bias_add(op_type, x_shape, weight, bias, addend, attributes):
    constants = {'w': weight, 'c': addend, **({'b': bias} if bias is not None else {})}
    linear_inputs = ['x', 'w'] + (['b'] if bias is not None else [])
    graph = onnx_graph([node(op_type, linear_inputs, 'y', **attributes),
                        node('Add', ['y', 'c'], 'out')], {'x': x_shape}, {'out': None}, constants)
    assert run_pass(graph, 'fuse_bias_add') == 1
    assert op_types(graph) == [op_type]
    assert graph.operations['y'].inputs[2].shape == (weight.shape[0 if op_type != 'ConvTranspose'
                                                                  else 1], )


@pytest.mark.parametrize('addend', [randn(1, 1, 3, 3), randn(1, 1, 4, 1, 1)])
def test_fuse_bias_add_leaves_constants_that_are_not_per_channel(addend):
    graph = onnx_graph([node('Conv', ['x', 'w'], 'y'), node('Add', ['y', 'c'], 'out')],
                       {'x': [1, 3, 5, 5]}, {'out': None}, {'w': randn(4, 3, 3, 3), 'c': addend})
    assert changes(graph, 'fuse_bias_add') == 0 and op_types(graph) == ['Conv', 'Add']
