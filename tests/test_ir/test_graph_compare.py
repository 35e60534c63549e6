"""structural_differences: each kind of difference is found and named."""
import torch

from ir_helpers import conv_relu_graph
from razorlib.ir import Opset, graphs_structurally_equal, structural_differences


def test_copies_are_identical_and_edits_are_named():
    graph = conv_relu_graph()
    assert graphs_structurally_equal(graph, graph.copy(copy_value=True))
    edits = {
        "variable 'w': values differ": lambda g: g.variables['w'].value.view(-1)[0].add_(1),
        "variable 'y': shape None != (1, 4, 6, 6)": lambda g: setattr(
            g.variables['y'], 'shape', (1, 4, 6, 6)),
        "variable 'y': dtype None != torch.float16": lambda g: setattr(
            g.variables['y'], 'dtype', torch.float16),
        "operation 'conv': attributes {} != {'group': 1}": lambda g: g.operations[
            'conv'].attributes.update(group=1),
        "operation 'conv': opset Opset(version=13, domain='') != Opset(version=17, domain='')":
            lambda g: setattr(g.operations['conv'], 'opset', Opset(17)),
        "operation 'relu': type 'Relu' != 'Sigmoid'": lambda g: setattr(
            g.operations['relu'], 'type', 'Sigmoid'),
        "operation 'conv': inputs ['x', 'w', 'b'] != ['x', 'b', 'w']": lambda g: g.operations[
            'conv'].inputs.insert(1, g.operations['conv'].inputs.pop()),
        "operation 'extra' is only in the second graph": lambda g: g.create_operation(
            'Relu', 'extra'),
        "graph outputs ['z'] != ['z', 'y']": lambda g: g.mark_variable_as_graph_output(
            g.variables['y']),
        "graph name 'net' != 'other'": lambda g: setattr(g, 'name', 'other'),
    }
    for expected, edit in edits.items():
        edited = graph.copy(copy_value=True)
        edit(edited)
        assert structural_differences(graph, edited) == [expected]


def test_attribute_tensors_compare_by_dtype_and_bits():
    graph = conv_relu_graph()
    graph.operations['relu'].attributes['t'] = torch.tensor([float('nan'), 1.0])
    same = graph.copy(copy_value=True)
    assert graphs_structurally_equal(graph, same)
    same.operations['relu'].attributes['t'] = torch.tensor([float('nan'), 1.0]).double()
    assert not graphs_structurally_equal(graph, same)
