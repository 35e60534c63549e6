"""Creating, registering, replacing and querying: links, names and errors."""
import pytest
import torch

from razorlib.ir import BaseGraph, Operation, Opset, Variable
from ir_helpers import conv_relu_graph, structure


def test_create_operation_links_both_sides():
    graph = BaseGraph()
    x, y = graph.create_variable('x'), graph.create_variable('y')
    op = graph.create_operation('Add', 'add', attributes={'a': 1}, inputs=[x, x], outputs=[y],
                                platform='INT8', opset=11)
    assert graph.operations == {'add': op}
    assert op.inputs == [x, x] and op.outputs == [y]
    assert x.dest_ops == [op, op] and y.source_op is op
    assert (op.attributes, op.platform, op.opset) == ({'a': 1}, 'INT8', Opset(11))
    graph.check()


def test_create_variable_links_both_sides():
    graph = BaseGraph()
    producer = graph.create_operation('Constant', 'const')
    consumer = graph.create_operation('Relu', 'relu')
    var = graph.create_variable('c', torch.ones(2), is_parameter=True, source_op=producer,
                                dest_ops=[consumer], shape=None, dtype=None)
    assert producer.outputs == [var] and consumer.inputs == [var]
    assert var.source_op is producer and var.dest_ops == [consumer]
    assert graph.variables == {'c': var}
    graph.check()


def test_generated_names_count_up_and_skip_taken_names():
    graph = BaseGraph()
    graph.create_variable('var_1')
    names = [graph.create_variable().name for _ in range(3)]
    assert names == ['var_0', 'var_2', 'var_3']
    graph.create_operation('Relu', 'op_0')
    assert graph.create_operation('Relu').name == 'op_1'


def build_with_edits():
    graph = conv_relu_graph()
    sigmoid = graph.create_operation('Sigmoid')
    graph.insert_op_after(sigmoid, graph.operations['conv'])
    identity = graph.create_operation('Identity')
    graph.insert_op_before(identity, graph.operations['relu'])
    graph.create_link_with_op(sigmoid, graph.operations['relu'])
    graph.remove_operation(identity, keep_coherence=True)
    graph.create_operation('Add', inputs=[graph.variables['x'], graph.create_variable()],
                           outputs=[graph.create_variable()])
    return graph


def test_same_construction_gives_same_names_and_orders():
    first, second = build_with_edits(), build_with_edits()
    assert structure(first) == structure(second)
    assert list(first.operations) == ['conv', 'relu', 'op_0', 'op_2']
    assert [op.name for op in first.topological_sort()] == \
        [op.name for op in second.topological_sort()]


@pytest.mark.parametrize('create', [
    lambda g: g.create_operation('Relu', 'relu'),
    lambda g: g.append_operation(Operation('relu', 'Sigmoid')),
])
def test_operation_name_clash_names_the_name(create):
    graph = conv_relu_graph()
    before = structure(graph)
    with pytest.raises(ValueError, match="already has a operation named 'relu'"):
        create(graph)
    assert structure(graph) == before


@pytest.mark.parametrize('create', [
    lambda g: g.create_variable('y'),
    lambda g: g.append_variable(Variable('y')),
])
def test_variable_name_clash_names_the_name(create):
    graph = conv_relu_graph()
    with pytest.raises(ValueError, match="already has a variable named 'y'"):
        create(graph)


def test_create_operation_rejects_foreign_and_produced_variables():
    graph = conv_relu_graph()
    before = structure(graph)
    with pytest.raises(ValueError, match="variable 'stray' is not in graph 'net'"):
        graph.create_operation('Relu', inputs=[Variable('stray')])
    with pytest.raises(ValueError, match="'z' is produced by operation 'relu'"):
        graph.create_operation('Relu', outputs=[graph.variables['z']])
    with pytest.raises(ValueError, match="'x' is a graph input"):
        graph.create_operation('Relu', outputs=[graph.variables['x']])
    fresh = graph.create_variable('fresh')
    with pytest.raises(ValueError, match="lists output 'fresh' twice"):
        graph.create_operation('Split', outputs=[fresh, fresh])
    graph.remove_variable(fresh)
    assert structure(graph) == before
    assert graph.create_operation('Relu').name == 'op_0'


def test_create_variable_rejects_foreign_operations():
    graph = conv_relu_graph()
    with pytest.raises(ValueError, match="operation 'ghost' is not in graph 'net'"):
        graph.create_variable(dest_ops=[Operation('ghost', 'Relu')])
    assert graph.create_variable().name == 'var_0'


def test_append_operation_links_the_variable_side():
    graph = conv_relu_graph()
    op = Operation('tanh', 'Tanh')
    op.inputs, op.outputs = [graph.variables['z']], [graph.create_variable('t')]
    graph.append_operation(op)
    assert graph.variables['z'].dest_ops == [op] and graph.variables['t'].source_op is op
    graph.check()


def test_append_operation_rejects_prelinked_variables():
    graph = conv_relu_graph()
    relu = graph.operations['relu']
    graph.remove_operation(relu)
    relu.inputs = [graph.variables['y']]
    graph.variables['y'].dest_ops.append(relu)
    with pytest.raises(ValueError, match="variable 'y' lists operation 'relu' already"):
        graph.append_operation(relu)


def test_append_variable_links_the_operation_side():
    graph = conv_relu_graph()
    relu = graph.operations['relu']
    var = Variable('extra')
    var.dest_ops = [relu, relu]
    graph.append_variable(var)
    assert relu.inputs[-2:] == [var, var]
    graph.check()


def test_append_variable_rejects_an_operation_that_lists_it():
    graph = conv_relu_graph()
    var = Variable('extra')
    relu = graph.operations['relu']
    relu.inputs.append(var)
    var.dest_ops.append(relu)
    with pytest.raises(ValueError, match="operation 'relu' lists variable 'extra' already"):
        graph.append_variable(var)


def test_replace_operation_keeps_position_and_links():
    graph = conv_relu_graph()
    conv = graph.operations['conv']
    new = Operation('conv', 'ConvInteger')
    new.inputs, new.outputs = list(conv.inputs), list(conv.outputs)
    graph.replace_operation(conv, new)
    assert list(graph.operations) == ['conv', 'relu'] and graph.operations['conv'] is new
    assert graph.variables['y'].source_op is new and graph.variables['x'].dest_ops == [new]
    assert conv.inputs == [] and conv.outputs == []
    graph.check()


def test_replace_operation_with_a_new_name_errors_on_clash():
    graph = conv_relu_graph()
    conv = graph.operations['conv']
    with pytest.raises(ValueError, match="already has a operation named 'relu'"):
        graph.replace_operation(conv, Operation('relu', 'Conv'))
    renamed = Operation('conv2', 'Conv')
    renamed.inputs, renamed.outputs = list(conv.inputs), list(conv.outputs)
    graph.replace_operation(conv, renamed)
    assert list(graph.operations) == ['conv2', 'relu']
    graph.check()


def test_upstream_and_downstream_are_distinct_and_ordered():
    graph = BaseGraph()
    a_out, b_out = graph.create_variable(), graph.create_variable()
    a = graph.create_operation('A', outputs=[a_out])
    b = graph.create_operation('B', outputs=[b_out])
    c = graph.create_operation('C', inputs=[b_out, a_out, b_out])
    d = graph.create_operation('D', inputs=[a_out])
    assert graph.get_upstream_operations(c) == [b, a]
    assert graph.get_downstream_operations(a) == [c, d]
    assert graph.get_upstream_operations(a) == [] and graph.get_downstream_operations(c) == []


@pytest.mark.parametrize('query', ['get_upstream_operations', 'get_downstream_operations'])
def test_queries_name_an_operation_not_in_the_graph(query):
    graph = conv_relu_graph()
    with pytest.raises(ValueError, match="operation 'stranger' is not in graph 'net'"):
        getattr(graph, query)(Operation('stranger', 'Relu'))
    impostor = Operation('relu', 'Relu')
    with pytest.raises(ValueError, match="operation 'relu' is not in graph 'net'"):
        getattr(graph, query)(impostor)


def test_mark_graph_input_and_output():
    graph = conv_relu_graph()
    y = graph.variables['y']
    with pytest.raises(ValueError, match="'y' is produced by operation 'conv'"):
        graph.mark_variable_as_graph_input(y)
    graph.mark_variable_as_graph_output(y)
    graph.mark_variable_as_graph_output(y)
    assert list(graph.outputs) == ['z', 'y']
    extra = graph.create_variable('extra')
    graph.mark_variable_as_graph_input(extra)
    assert list(graph.inputs) == ['x', 'extra']
    with pytest.raises(ValueError, match="variable 'ghost' is not in graph"):
        graph.mark_variable_as_graph_output(Variable('ghost'))
    graph.check()
