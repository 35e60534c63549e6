"""from_onnx / to_onnx: what a model holds survives both ways; what the IR cannot hold fails."""
import re

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from razorlib.ir import (EMPTY_NAME, BaseGraph, Opset, TorchExecutor, from_onnx,
                         structural_differences, to_onnx)


def _value_info(name, elem_type=TensorProto.FLOAT, shape=(2, 3)):
    return helper.make_tensor_value_info(name, elem_type, shape)


def _model(nodes, inputs, outputs, initializers=(), value_info=(), opsets=(('', 17), ),
           functions=()):
    graph = helper.make_graph(nodes, 'model', inputs, outputs, initializer=initializers,
                              value_info=value_info)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid(*item)
                                                   for item in opsets], functions=functions)


def _onnxruntime(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=['CPUExecutionProvider'])
    return session.run(None, feeds)


def rich_graph():
    """Attributes of every kind, a custom domain, an absent input, symbolic and unknown dims,
    parameters of several dtypes, an intermediate of unknown shape."""
    graph = BaseGraph('rich')
    x = graph.create_variable('x', shape=('batch', 3, None), dtype=torch.float32)
    graph.mark_variable_as_graph_input(x)
    weights = {name: graph.create_variable(name, value, is_parameter=True) for name, value in (
        ('w_bf16', torch.randn(3).to(torch.bfloat16)), ('w_half', torch.randn(2, 2).half()),
        ('w_int8', torch.tensor([-3, 4], dtype=torch.int8)), ('mask', torch.tensor([True])),
        ('min', torch.tensor(-1.0)))}
    hidden = graph.create_variable('hidden')
    graph.create_operation(
        'Custom', 'custom', opset=Opset(2, 'com.example'),
        attributes={'i': 3, 'f': 0.25, 's': 'text', 'ints': [1, -2], 'floats': [0.5, 1.5],
                    'strings': ['a', 'b'], 't': torch.arange(4, dtype=torch.int64),
                    'ts': [torch.ones(2), torch.zeros(1, dtype=torch.int32)], 'empty': []},
        inputs=[x, *weights.values()], outputs=[hidden])
    clipped = graph.create_variable('clipped', shape=('batch', 3, None), dtype=torch.float32)
    graph.create_operation('Clip', 'clip', opset=17,
                           inputs=[hidden, graph.create_variable(EMPTY_NAME), weights['min']],
                           outputs=[clipped])
    graph.mark_variable_as_graph_output(clipped)
    graph.mark_variable_as_graph_output(hidden)
    hidden.shape, hidden.dtype = (7, ), torch.float32
    return graph


def test_round_trip_is_structurally_identical():
    graph = rich_graph()
    model = to_onnx(graph)
    onnx.checker.check_model(model)
    assert structural_differences(from_onnx(model), graph) == []
    assert {(item.domain, item.version) for item in model.opset_import} == {
        ('', 17), ('com.example', 2)}
    assert [item.name for item in model.graph.initializer] == [
        'w_bf16', 'w_half', 'w_int8', 'mask', 'min']


def test_from_onnx_decodes_attributes_tensors_and_types():
    weight = numpy_helper.from_array(torch.randn(4, 3).numpy(), 'weight')
    nodes = [helper.make_node('Gemm', ['x', 'weight'], ['y'], name='gemm', transB=1,
                              alpha=0.5),
             helper.make_node('Resize', ['y', '', 'scales'], ['z'], name='resize',
                              mode='nearest')]
    scales = numpy_helper.from_array(torch.tensor([1.0, 2.0]).numpy(), 'scales')
    model = _model(nodes, [_value_info('x', shape=('n', 3))],
                   [_value_info('z', shape=('n', None))], [weight, scales],
                   [_value_info('y', shape=('n', 4))])
    graph = from_onnx(model)
    gemm, resize = graph.operations['gemm'], graph.operations['resize']
    assert gemm.attributes == {'transB': 1, 'alpha': 0.5}
    assert resize.attributes == {'mode': 'nearest'} and resize.opset == Opset(17)
    assert [var.name for var in resize.inputs] == ['y', EMPTY_NAME, 'scales']
    parameter = graph.variables['weight']
    assert parameter.is_parameter and isinstance(parameter.value, torch.Tensor)
    expected = torch.from_numpy(numpy_helper.to_array(weight).copy())
    assert torch.equal(parameter.value, expected)
    assert graph.variables['y'].shape == ('n', 4) and graph.variables['z'].shape == ('n', None)
    assert graph.variables['x'].dtype == torch.float32
    assert list(graph.inputs) == ['x'] and list(graph.outputs) == ['z']


def test_large_weights_arrive_as_tensors_with_their_bits():
    value = torch.randn(1 << 20)
    model = _model([helper.make_node('Add', ['x', 'big'], ['y'])],
                   [_value_info('x', shape=(1 << 20, ))], [_value_info('y', shape=(1 << 20, ))],
                   [numpy_helper.from_array(value.numpy(), 'big')])
    big = from_onnx(model).variables['big'].value
    assert big.dtype == torch.float32 and torch.equal(big, value)
    big.add_(1)  # writable, and not a view of the model's bytes
    stored = numpy_helper.to_array(model.graph.initializer[0]).copy()
    assert torch.equal(torch.from_numpy(stored), value)


def test_unnamed_nodes_and_outputs_get_fresh_unused_names():
    # The empty name before InvStdDev keeps its place: it gets a name.
    nodes = [helper.make_node('Relu', ['x'], ['op_0']),
             helper.make_node('LayerNormalization', ['op_0', 'scale'], ['y', '', 'inv']),
             helper.make_node('Neg', ['y'], ['z'], name='op_0')]
    graph = from_onnx(_model(nodes, [_value_info('x')], [_value_info('z')],
                             [numpy_helper.from_array(np.ones(3, np.float32), 'scale')]))
    assert list(graph.operations) == ['op_1', 'op_2', 'op_0']
    norm = graph.operations['op_2']
    assert [var.name for var in norm.outputs] == ['y', 'var_0', 'inv']
    graph.check()


def test_absent_optional_outputs_at_the_end_of_a_node_are_left_out():
    # MaxPool's Indices written as '': the values alone run with asymmetric pads, which
    # the executor refuses for Indices; a named Indices output was computed and exported.
    node = helper.make_node('MaxPool', ['x'], ['y', ''], kernel_shape=[2], pads=[0, 1])
    model = _model([node], [_value_info('x', shape=(1, 1, 4))],
                   [_value_info('y', shape=(1, 1, 4))])
    graph = from_onnx(model)
    assert [var.name for var in graph.operations['op_0'].outputs] == ['y']
    x = np.array([[[1.0, -2.0, 3.0, 0.5]]], np.float32)
    expected = _onnxruntime(model, {'x': x})
    assert TorchExecutor(graph)(torch.from_numpy(x))[0].tolist() == expected[0].tolist()
    assert list(to_onnx(graph).graph.node[0].output) == ['y']


def test_subgraph_attributes_are_refused_naming_the_node():
    branch = helper.make_graph([helper.make_node('Identity', ['x'], ['out'])], 'branch', [],
                               [_value_info('out')])
    node = helper.make_node('If', ['cond'], ['y'], name='branch_node', then_branch=branch,
                            else_branch=branch)
    model = _model([node], [_value_info('cond', TensorProto.BOOL, [])], [_value_info('y')])
    with pytest.raises(NotImplementedError, match="'branch_node'.*GRAPH"):
        from_onnx(model)


def test_local_functions_are_inlined():
    function = helper.make_function('local', 'DoubleRelu', ['a'], ['b'],
                                    [helper.make_node('Relu', ['a'], ['r']),
                                     helper.make_node('Add', ['r', 'r'], ['b'])],
                                    [helper.make_opsetid('', 17)])
    model = _model([helper.make_node('DoubleRelu', ['x'], ['y'], domain='local')],
                   [_value_info('x')], [_value_info('y')],
                   opsets=(('', 17), ('local', 1)), functions=[function])
    graph = from_onnx(model)
    assert sorted(op.type for op in graph.operations.values()) == ['Add', 'Relu']


def test_to_onnx_refuses_a_variable_nothing_provides():
    graph = rich_graph()
    graph.operations['clip'].inputs[2].value = None
    with pytest.raises(ValueError, match="'clip' reads 'min', which no operation produces"):
        to_onnx(graph)


def test_each_domain_gets_its_highest_opset():
    graph = BaseGraph()
    x = graph.create_variable('x', shape=(1, ), dtype=torch.float32)
    graph.mark_variable_as_graph_input(x)
    y = graph.create_variable('y')
    graph.create_operation('Relu', inputs=[x], outputs=[y], opset=14)  # Relu-14 holds at 18
    z = graph.create_variable('z', shape=(1, ), dtype=torch.float32)
    graph.create_operation('Neg', inputs=[y], outputs=[z], opset=18)
    graph.mark_variable_as_graph_output(z)
    model = to_onnx(graph)
    assert [(item.domain, item.version) for item in model.opset_import] == [('', 18)]
    assert from_onnx(model).operations['op_0'].opset == Opset(18)


def test_to_onnx_refuses_an_operation_the_highest_opset_redefines():
    # Softmax normalizes a 2-D flattening at opset 11, one axis from 13: imported at 20
    # for the Gelu, it would silently compute something else.
    graph = BaseGraph('mixed')
    x = graph.create_variable('x', shape=(2, 3, 4), dtype=torch.float32)
    graph.mark_variable_as_graph_input(x)
    hidden = graph.create_variable('hidden')
    graph.create_operation('Gelu', 'gelu', inputs=[x], outputs=[hidden], opset=20)
    y = graph.create_variable('y', shape=(2, 3, 4), dtype=torch.float32)
    graph.create_operation('Softmax', 'softmax', inputs=[hidden], outputs=[y], opset=11)
    graph.mark_variable_as_graph_output(y)
    with pytest.raises(ValueError, match=re.escape(
            "graph 'mixed': its default-domain operations carry different opset versions; "
            "exported at the highest, 20, these would change meaning: 'softmax' (Softmax of "
            "opset 11; opset 20 has Softmax-13)")):
        to_onnx(graph)


def test_empty_tensors_are_exported():
    # The TorchScript exporter writes an empty roi for every F.interpolate.
    nodes = [helper.make_node('Resize', ['x', 'roi', 'scales'], ['y'], mode='nearest')]
    model = _model(nodes, [_value_info('x', shape=(1, 1, 2, 2))],
                   [_value_info('y', shape=(1, 1, 4, 4))],
                   [numpy_helper.from_array(np.zeros(0, np.float32), 'roi'),
                    numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), 'scales')])
    exported = to_onnx(from_onnx(model))
    onnx.checker.check_model(exported)
    roi = next(item for item in exported.graph.initializer if item.name == 'roi')
    assert list(roi.dims) == [0] and numpy_helper.to_array(roi).shape == (0, )
    feeds = {'x': np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2)}
    np.testing.assert_array_equal(_onnxruntime(exported, feeds), _onnxruntime(model, feeds))


def test_extension_attributes_are_not_exported():
    graph = rich_graph()
    graph.extension_attrib['note'] = 'graph'
    graph.operations['clip'].extension_attrib['note'] = 'op'
    back = from_onnx(to_onnx(graph))
    assert back.extension_attrib == {} and back.operations['clip'].extension_attrib == {}
    assert 'note' not in str(to_onnx(graph))


def test_save_and_load_with_external_data(tmp_path):
    graph = rich_graph()
    path = tmp_path / 'rich.onnx'
    to_onnx(graph, path, external_data=True)
    assert (tmp_path / 'rich.onnx.data').exists()
    assert structural_differences(from_onnx(path), graph) == []


@pytest.mark.parametrize('content,why', [(b'', 'it holds no graph'),
                                         (b'\xff\x00 not a model', 'Error parsing message')])
def test_a_file_that_holds_no_onnx_model_is_refused_naming_it(tmp_path, content, why):
    path = tmp_path / 'model.onnx'
    path.write_bytes(content)
    with pytest.raises(ValueError, match=rf'{re.escape(str(path))}: not an ONNX model .*{why}'):
        from_onnx(path)


def test_a_repeated_graph_output_is_returned_as_often_as_the_model_lists_it():
    # The TorchScript exporter writes `return y, y` as the outputs ['1', '1'].
    nodes = [helper.make_node('Relu', ['x'], ['y']), helper.make_node('Neg', ['x'], ['z'])]
    model = _model(nodes, [_value_info('x', shape=(2, ))],
                   [_value_info(name, shape=(2, )) for name in ('y', 'z', 'y')])
    graph = from_onnx(model)
    assert list(graph.outputs) == ['y', 'z', 'var_0']
    alias = graph.variables['var_0'].source_op
    assert (alias.type, alias.inputs, alias.opset) == ('Identity', [graph.variables['y']],
                                                       Opset(17))
    got = TorchExecutor(graph)(torch.tensor([1.0, -1.0]))
    assert [tensor.tolist() for tensor in got] == [[1.0, 0.0], [-1.0, 1.0], [1.0, 0.0]]
    exported = _onnxruntime(to_onnx(graph), {'x': np.array([1.0, -1.0], np.float32)})
    assert [array.tolist() for array in exported] == [[1.0, 0.0], [-1.0, 1.0], [1.0, 0.0]]


def _matmul_saved_with_external_data(folder, weight):
    folder.mkdir()
    model = _model([helper.make_node('MatMul', ['x', 'w'], ['y'])],
                   [_value_info('x', shape=(1, 2))], [_value_info('y', shape=(1, 2))],
                   [numpy_helper.from_array(np.full((2, 2), weight, np.float32), 'w')])
    onnx.save_model(model, folder / 'model.onnx', save_as_external_data=True,
                    location='model.onnx.data', size_threshold=0)
    return folder / 'model.onnx'


def test_a_model_proto_without_its_external_data_is_refused(tmp_path, monkeypatch):
    path = _matmul_saved_with_external_data(tmp_path / 'a', 1.0)
    # The working directory holds another model's data file of the same name.
    monkeypatch.chdir(_matmul_saved_with_external_data(tmp_path / 'b', 7.0).parent)
    proto = onnx.load(path, load_external_data=False)
    with pytest.raises(ValueError, match=re.escape(
            "tensors ['w'] keep their data in external file(s) ['model.onnx.data'], relative "
            "to the model file's folder")):
        from_onnx(proto)
    assert from_onnx(path).variables['w'].value.unique().tolist() == [1.0]
    onnx.load_external_data_for_model(proto, str(path.parent))
    assert from_onnx(proto).variables['w'].value.unique().tolist() == [1.0]


def test_saving_again_with_external_data_replaces_the_data_file(tmp_path):
    graph = from_onnx(_model([helper.make_node('MatMul', ['x', 'w'], ['y'])],
                             [_value_info('x', shape=(2, 3))], [_value_info('y', shape=(2, 4))],
                             [numpy_helper.from_array(np.ones((3, 4), np.float32), 'w')]))
    other = tmp_path / 'other.data'
    other.write_bytes(b'not ours')
    path = tmp_path / 'model.onnx'
    for _ in range(2):
        to_onnx(graph, path, external_data=True)
        assert (tmp_path / 'model.onnx.data').stat().st_size == 3 * 4 * 4  # 12 float32
    assert torch.equal(from_onnx(path).variables['w'].value, torch.ones(3, 4))
    assert other.read_bytes() == b'not ours'


def _constant_of_empty_floats():
    node = helper.make_node('Constant', [], ['c'], name='const')
    node.attribute.append(helper.make_attribute('value_floats', [],
                                                attr_type=onnx.AttributeProto.FLOATS))
    return _model([node], [], [_value_info('c', shape=(0, ))], opsets=(('', 13), ))


def test_an_empty_list_attribute_keeps_its_type_from_the_schema():
    exported = to_onnx(from_onnx(_constant_of_empty_floats()))
    assert exported.graph.node[0].attribute[0].type == onnx.AttributeProto.FLOATS
    output, = _onnxruntime(exported, {})
    assert output.dtype == np.float32 and output.shape == (0, )


def test_an_empty_list_attribute_no_schema_knows_keeps_its_imported_type():
    node = helper.make_node('Custom', ['x'], ['y'], domain='com.example')
    node.attribute.append(helper.make_attribute('weights', [],
                                                attr_type=onnx.AttributeProto.FLOATS))
    model = _model([node], [_value_info('x')], [_value_info('y')],
                   opsets=(('', 17), ('com.example', 1)))
    attribute, = to_onnx(from_onnx(model)).graph.node[0].attribute
    assert (attribute.name, attribute.type) == ('weights', onnx.AttributeProto.FLOATS)


def test_a_graph_output_nothing_provides_is_refused_naming_it():
    graph = from_onnx(_model([helper.make_node('Relu', ['x'], ['r']),
                              helper.make_node('Neg', ['r'], ['y'], name='neg')],
                             [_value_info('x')], [_value_info('y')]))
    graph.remove_operation(graph.operations['neg'])
    with pytest.raises(ValueError, match="graph output 'y', which no operation produces"):
        to_onnx(graph)


def _string_attribute_node():
    node = helper.make_node('Resize', ['x'], ['y'], name='resize')
    node.attribute.append(onnx.AttributeProto(name='mode', type=onnx.AttributeProto.STRING,
                                              s=b'\xff\xfe'))
    return node


@pytest.mark.parametrize('model,error,message', [
    (_model([helper.make_node('DequantizeLinear', ['w4', 'scale'], ['y'])], [],
            [_value_info('y', shape=(4, ))],
            [helper.make_tensor('w4', TensorProto.INT4, [4], [1, -2, 3, -4]),
             helper.make_tensor('scale', TensorProto.FLOAT, [], [0.5])], opsets=(('', 21), )),
     NotImplementedError, "initializer 'w4': ONNX element type INT4 has no torch dtype"),
    (_model([helper.make_node('Identity', ['s'], ['y'])],
            [_value_info('s', TensorProto.STRING, (1, ))],
            [_value_info('y', TensorProto.STRING, (1, ))]),
     NotImplementedError, "tensor 's': ONNX element type STRING has no torch dtype"),
    (_model([helper.make_node('Constant', [], ['c'], name='const', value=helper.make_tensor(
        'v', TensorProto.STRING, [1], [b'hi']))], [], [_value_info('c', TensorProto.STRING)]),
     NotImplementedError, "node 'const': attribute 'value': ONNX element type STRING"),
    (_model([_string_attribute_node()], [_value_info('x')], [_value_info('y')]),
     ValueError, "node 'resize': attribute 'mode': the string is not UTF-8 text"),
], ids=['int4-initializer', 'string-input', 'string-constant', 'non-utf8-attribute'])
def test_what_the_ir_cannot_hold_is_refused_naming_the_tensor_or_node(model, error, message):
    with pytest.raises(error, match=re.escape(message)):
        from_onnx(model)
