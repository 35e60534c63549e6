"""Operation: attributes, opset, platform, parameter views, copies and sockets."""
import pytest
import torch

from razorlib.ir import (SOCKET_RULES, Operation, Opset, SocketRule, TensorRole, Variable,
                         socket_for)

ACT, WEIGHT, BIAS = TensorRole.ACTIVATION, TensorRole.WEIGHT, TensorRole.BIAS
FIXED = TensorRole.NOT_QUANTIZED


def linked_conv():
    op = Operation('conv', 'Conv', {'kernel_shape': [3, 3]})
    op.inputs = [Variable('x'), Variable('w', torch.ones(1), is_parameter=True),
                 Variable('b', torch.ones(1), is_parameter=True)]
    op.outputs = [Variable('y')]
    return op


def test_defaults():
    op = Operation('n', 'Relu')
    assert (op.name, op.type, op.attributes, op.extension_attrib) == ('n', 'Relu', {}, {})
    assert op.opset == Opset(13, '') and op.platform == 'UNSPECIFIED'
    assert op.inputs == [] and op.outputs == []


def test_attributes_are_copied_into_a_new_dict():
    attributes = {'axis': 1}
    op = Operation('n', 'Concat', attributes)
    attributes['axis'] = 2
    assert op.attributes == {'axis': 1}


def test_int_opset_is_a_default_domain_version():
    assert Operation('n', 'Relu', opset=17).opset == Opset(17)
    custom = Opset(1, 'com.microsoft')
    assert Operation('n', 'QLinearConv', opset=custom).opset is custom


def test_ai_onnx_is_stored_as_the_default_domain():
    # Two spellings would export two imports of one domain, which onnx.checker rejects.
    assert Opset(17, 'ai.onnx') == Opset(17) and Opset(17, 'ai.onnx').domain == ''


def test_opset_version_defaults_to_13_only_in_the_default_domain():
    assert Opset().version == 13
    assert Opset(domain='com.microsoft').version is None  # unknown: to_onnx refuses it


def test_platform_accepts_any_value():
    op = Operation('n', 'Relu', platform=('int8', 3))
    op.platform = object
    assert op.platform is object


def test_parameters_counts_and_read_only_view():
    op = linked_conv()
    assert [v.name for v in op.parameters] == ['w', 'b']
    assert (op.num_of_parameter, op.num_of_input, op.num_of_output) == (2, 3, 1)
    assert isinstance(op.parameters, tuple)
    with pytest.raises(AttributeError):
        op.parameters = ()
    op.inputs[1].is_parameter = False
    assert [v.name for v in op.parameters] == ['b']


def test_copy_is_unlinked_with_deep_copied_attributes():
    op = linked_conv()
    op.platform = 'INT8'
    op.extension_attrib['note'] = ['fused']
    clone = op.copy()
    assert type(clone) is Operation and clone is not op
    assert (clone.name, clone.type, clone.opset, clone.platform) == ('conv', 'Conv', op.opset,
                                                                     'INT8')
    assert clone.inputs == [] and clone.outputs == []
    clone.attributes['kernel_shape'].append(5)
    clone.extension_attrib['note'].append('x')
    assert op.attributes == {'kernel_shape': [3, 3]} and op.extension_attrib == {'note': ['fused']}


def test_repr_lists_tensors():
    assert repr(linked_conv()) == ("Operation(name='conv', type='Conv', inputs=['x', 'w', 'b'], "
                                   "outputs=['y'])")


@pytest.mark.parametrize('op_type', ['Conv', 'Gemm', 'MatMul', 'ConvTranspose'])
def test_weighted_ops_socket(op_type):
    socket = socket_for(op_type, 3, 1)
    assert socket.inputs == (ACT, WEIGHT, BIAS) and socket.outputs == (ACT, )
    assert socket.quantized_inputs == (0, 1, 2)
    assert socket.flows == ((0, 0), )
    assert socket_for(op_type, 2, 1).inputs == (ACT, WEIGHT)


def test_operation_socket_follows_its_tensor_count():
    op = linked_conv()
    assert op.socket.inputs == (ACT, WEIGHT, BIAS)
    op.inputs.pop()
    assert op.socket.inputs == (ACT, WEIGHT)


@pytest.mark.parametrize('op_type', ['Add', 'Concat', 'Mul', 'Sum'])
def test_variadic_ops_quantize_every_input(op_type):
    socket = socket_for(op_type, 4, 1)
    assert socket.inputs == (ACT, ) * 4
    assert socket.flows == ((0, 0), (1, 0), (2, 0), (3, 0))


@pytest.mark.parametrize('op_type,num_inputs', [('Reshape', 2), ('Resize', 4), ('Slice', 5),
                                                ('Gather', 2), ('Pad', 3), ('Unsqueeze', 2)])
def test_data_then_control_ops(op_type, num_inputs):
    socket = socket_for(op_type, num_inputs, 1)
    assert socket.inputs == (ACT, ) + (FIXED, ) * (num_inputs - 1)
    assert socket.quantized_inputs == (0, )
    assert socket.flows == ((0, 0), )


def test_split_flows_to_every_output():
    assert socket_for('Split', 2, 3).flows == ((0, 0), (0, 1), (0, 2))


def test_index_outputs_are_not_quantized():
    topk = socket_for('TopK', 2, 2)
    assert topk.outputs == (ACT, FIXED) and topk.quantized_outputs == (0, )
    assert topk.flows == ((0, 0), )
    shape = socket_for('Shape', 1, 1)
    assert shape.quantized_outputs == () and shape.flows == ()


def test_where_condition_is_not_quantized():
    assert socket_for('Where', 3, 1).quantized_inputs == (1, 2)


def test_unknown_op_type_is_all_activations():
    socket = socket_for('MyCustomOp', 2, 2)
    assert socket.inputs == (ACT, ACT) and socket.outputs == (ACT, ACT)
    assert len(socket.flows) == 4


def test_rule_table_is_extensible(monkeypatch):
    monkeypatch.setitem(SOCKET_RULES, 'FusedConvRelu', SOCKET_RULES['Conv'])
    assert Operation('f', 'FusedConvRelu').socket == socket_for('Conv', 0, 0)
    rule = SocketRule(inputs=(ACT, FIXED), more_inputs=ACT, outputs=(FIXED, ))
    assert rule.build(3, 2).inputs == (ACT, FIXED, ACT)
    assert rule.build(3, 2).outputs == (FIXED, ACT)
    assert rule.build(1, 0).inputs == (ACT, ) and rule.build(1, 0).outputs == ()


@pytest.mark.parametrize('op_type,num_inputs,inputs', [
    ('ConstantOfShape', 1, (FIXED, )),
    ('ScatterND', 3, (ACT, FIXED, ACT)),
    ('GatherND', 2, (ACT, FIXED)),
    ('Range', 3, (FIXED, FIXED, FIXED)),
])
def test_shape_and_index_inputs_are_not_quantized(op_type, num_inputs, inputs):
    assert socket_for(op_type, num_inputs, 1).inputs == inputs


def test_range_outputs_an_index_sequence():
    assert socket_for('Range', 3, 1).outputs == (FIXED, )
