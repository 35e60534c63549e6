"""Small graphs shared by the quantization tests."""
import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

from razorlib.ir import BaseGraph, from_onnx


class GraphBuilder:
    """Terse IR construction: ``op('Conv', 'conv', ['x', 'w'])`` writes output ``conv``."""

    def __init__(self, name='net', inputs=('x', )):
        self.graph = BaseGraph(name)
        for input_name in inputs:
            self.graph.mark_variable_as_graph_input(self.graph.create_variable(input_name))

    def param(self, name, value):
        return self.graph.create_variable(name, torch.as_tensor(value), is_parameter=True)

    def op(self, op_type, name, inputs, attributes=None, num_outputs=1):
        outputs = [self.graph.create_variable(name if index == 0 else f'{name}:{index}')
                   for index in range(num_outputs)]
        return self.graph.create_operation(op_type, name, attributes,
                                           [self.graph.variables[i] for i in inputs], outputs)

    def output(self, *names):
        for name in names:
            self.graph.mark_variable_as_graph_output(self.graph.variables[name])
        return self.graph


def dispatcher_graph():
    """x -> conv1 -> relu1 -> sig -> conv2 -> soft; add(soft, relu1) -> reshape(shape of add).

    The reshape's shape comes from Shape -> Gather -> Concat, an SOI subgraph.
    """
    b = GraphBuilder('dispatch')
    b.param('w1', torch.randn(4, 3, 1, 1))
    b.param('w2', torch.randn(4, 4, 1, 1))
    b.param('first', torch.tensor([0]))
    b.param('minus_one', torch.tensor([-1]))
    b.op('Conv', 'conv1', ['x', 'w1'])
    b.op('Relu', 'relu1', ['conv1'])
    b.op('Sigmoid', 'sig', ['relu1'])
    b.op('Conv', 'conv2', ['sig', 'w2'])
    b.op('Softmax', 'soft', ['conv2'])
    b.op('Add', 'add', ['soft', 'relu1'])
    b.op('Shape', 'shape', ['add'])
    b.op('Gather', 'gather', ['shape', 'first'])
    b.op('Concat', 'concat', ['gather', 'minus_one'], {'axis': 0})
    b.op('Reshape', 'reshape', ['add', 'concat'])
    return b.output('reshape')


def _initializer(name, values, dtype=np.float32):
    return numpy_helper.from_array(np.asarray(values, dtype=dtype), name)


def soi_onnx_graph():
    """An ONNX model (built with onnx.helper) with two shape-or-index subgraphs.

    ``Shape -> Gather -> Unsqueeze -> Concat(Constant) -> Reshape.shape`` flattens the
    relu output; ``Shape -> Slice -> Cast`` of two tensors, divided, then concatenated
    with ones, gives the scales of a Resize of the relu output to ``big``'s size.
    """
    nodes = [
        helper.make_node('Conv', ['x', 'w'], ['c'], name='conv', pads=[1, 1, 1, 1]),
        helper.make_node('Relu', ['c'], ['r'], name='relu'),
        helper.make_node('Shape', ['r'], ['r_shape'], name='shape'),
        helper.make_node('Gather', ['r_shape', 'zero'], ['batch'], name='gather', axis=0),
        helper.make_node('Unsqueeze', ['batch', 'axes0'], ['batch1'], name='unsqueeze'),
        helper.make_node('Constant', [], ['minus_one'], name='constant',
                         value=numpy_helper.from_array(np.array([-1], np.int64))),
        helper.make_node('Concat', ['batch1', 'minus_one'], ['flat_shape'], name='concat',
                         axis=0),
        helper.make_node('Reshape', ['r', 'flat_shape'], ['flat'], name='reshape'),
        helper.make_node('Shape', ['big'], ['big_shape'], name='big_shape_op'),
        helper.make_node('Slice', ['big_shape', 'two', 'four'], ['big_hw'], name='big_slice'),
        helper.make_node('Cast', ['big_hw'], ['big_hw_f'], name='big_cast', to=TensorProto.FLOAT),
        helper.make_node('Slice', ['r_shape', 'two', 'four'], ['r_hw'], name='r_slice'),
        helper.make_node('Cast', ['r_hw'], ['r_hw_f'], name='r_cast', to=TensorProto.FLOAT),
        helper.make_node('Div', ['big_hw_f', 'r_hw_f'], ['hw_scales'], name='div'),
        helper.make_node('Concat', ['ones', 'hw_scales'], ['scales'], name='scales_concat',
                         axis=0),
        helper.make_node('Resize', ['r', '', 'scales'], ['up'], name='resize'),
        helper.make_node('Add', ['up', 'big'], ['out'], name='add'),
    ]
    initializers = [
        _initializer('w', np.random.default_rng(0).standard_normal((4, 3, 3, 3))),
        _initializer('zero', 0, np.int64), _initializer('axes0', [0], np.int64),
        _initializer('two', [2], np.int64), _initializer('four', [4], np.int64),
        _initializer('ones', [1.0, 1.0]),
    ]
    inputs = [helper.make_tensor_value_info('x', TensorProto.FLOAT, [1, 3, 8, 8]),
              helper.make_tensor_value_info('big', TensorProto.FLOAT, [1, 4, 16, 16])]
    outputs = [helper.make_tensor_value_info('flat', TensorProto.FLOAT, [1, 256]),
               helper.make_tensor_value_info('out', TensorProto.FLOAT, [1, 4, 16, 16])]
    model = helper.make_model(helper.make_graph(nodes, 'soi', inputs, outputs, initializers),
                              opset_imports=[helper.make_opsetid('', 17)])
    onnx.checker.check_model(model, full_check=True)
    return from_onnx(model)


def conv_concat_graph():
    """x -> conv_a -> relu_a ; x -> conv_b ; concat(relu_a, conv_b) -> soft (graph output)."""
    b = GraphBuilder('concat')
    for branch in 'ab':
        b.param(f'w{branch}', torch.randn(8, 3, 3, 3))
        b.param(f'b{branch}', torch.randn(8))
    b.op('Conv', 'conv_a', ['x', 'wa', 'ba'])
    b.op('Relu', 'relu_a', ['conv_a'])
    b.op('Conv', 'conv_b', ['x', 'wb', 'bb'])
    b.op('Concat', 'concat', ['relu_a', 'conv_b'], {'axis': 1})
    b.op('Softmax', 'soft', ['concat'])
    return b.output('soft')


def residual_graph():
    """x -> conv -> add(conv, y) with y a second graph input."""
    b = GraphBuilder('residual', inputs=('x', 'y'))
    b.param('w', torch.randn(4, 4, 1, 1))
    b.op('Conv', 'conv', ['x', 'w'])
    b.op('Add', 'add', ['conv', 'y'])
    return b.output('add')
