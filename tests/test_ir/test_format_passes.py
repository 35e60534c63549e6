"""The format passes: DeleteIsolated, FormatParameter, FormatConstant."""
import numpy as np
import torch
from onnx import numpy_helper

from pass_helpers import changes, node, onnx_graph, op_types, random_inputs, run_pass

W = np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32)


def branching_graph():
    """x -> conv -> relu -> out; conv -> neg -> mul(w2) -> side; x -> dead (no output)."""
    return onnx_graph(
        [node('Conv', ['x', 'w'], 'c', pads=[1, 1, 1, 1]), node('Relu', ['c'], 'out'),
         node('Neg', ['c'], 'n'), node('Mul', ['n', 'w2'], 'side'),
         node('Sigmoid', ['x'], 'dead'), node('Mul', ['dead', 'w3'], 'dead2')],
        {'x': [1, 3, 5, 5]}, {'out': None, 'side': None},
        {'w': W, 'w2': [2.0], 'w3': [3.0]})


def test_delete_isolated_keeps_what_the_outputs_need():
    graph = branching_graph()
    graph.create_variable('loose')
    unused_input = graph.create_variable('unused', shape=(1, ))
    graph.mark_variable_as_graph_input(unused_input)
    inputs = random_inputs(graph)
    removed = run_pass(graph, 'delete_isolated', inputs)
    # dead, dead2, their outputs, w3 and loose; the unused graph input stays.
    assert removed == 6
    assert op_types(graph) == ['Conv', 'Relu', 'Neg', 'Mul']
    assert 'unused' in graph.inputs and 'loose' not in graph.variables
    assert run_pass(graph, 'delete_isolated', inputs) == 0


def test_format_parameter_gives_each_reader_its_own_copy():
    graph = onnx_graph(
        [node('Conv', ['x', 'w'], 'a', pads=[1, 1, 1, 1]), node('Conv', ['a', 'w'], 'b'),
         node('Mul', ['b', 'scale'], 'c'), node('Mul', ['scale', 'scale'], 'square'),
         node('Mul', ['c', 'square'], 'out')],
        {'x': [1, 4, 6, 6]}, {'out': None},
        {'w': np.random.default_rng(1).standard_normal((4, 4, 3, 3)).astype(np.float32),
         'scale': [1.5]})
    copies = run_pass(graph, 'format_parameter')
    assert copies == 2
    ops = graph.operations
    assert [var.name for var in ops['b'].inputs] == ['a', 'w_1']
    assert [var.name for var in ops['square'].inputs] == ['scale_1', 'scale_1']
    assert all(len(set(var.dest_ops)) == 1 for var in graph.variables.values()
               if var.is_parameter)
    # The copies are tensors of their own.
    ops['b'].inputs[1].value.zero_()
    assert graph.variables['w'].value.abs().sum() > 0
    assert changes(graph, 'format_parameter') == 0


def test_format_parameter_leaves_graph_inputs_shared():
    graph = onnx_graph([node('Add', ['x', 'w'], 'a'), node('Mul', ['a', 'w'], 'out')],
                       {'x': [2], 'w': [2]}, {'out': None}, {'w': [1.0, 2.0]})
    assert changes(graph, 'format_parameter') == 0


def test_format_constant_turns_constants_into_parameters():
    graph = onnx_graph(
        [node('Constant', [], 'two', value_float=2.0),
         node('Constant', [], 'shape', value_ints=[2, 3]),
         node('Constant', [], 'bias', value=numpy_helper.from_array(np.ones(3, np.float32))),
         node('Mul', ['x', 'two'], 'doubled'), node('Reshape', ['doubled', 'shape'], 'r'),
         node('Add', ['r', 'bias'], 'out')],
        {'x': [6]}, {'out': None})
    assert run_pass(graph, 'format_constant') == 3
    assert op_types(graph) == ['Mul', 'Reshape', 'Add']
    shape = graph.variables['shape']
    assert shape.is_parameter and shape.source_op is None and shape.value.tolist() == [2, 3]
    assert shape.dtype == torch.int64 and graph.variables['two'].dtype == torch.float32


def test_format_constant_keeps_constants_it_cannot_hold():
    graph = onnx_graph([node('Constant', [], 'label', value_string='kept')], {}, {'label': None})
    assert changes(graph, 'format_constant') == 0
    assert op_types(graph) == ['Constant']
