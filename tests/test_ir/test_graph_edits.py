"""Graph edits: insertion, removal, links, topological order and the invariant check."""
import pytest
import torch

from razorlib.ir import (BaseGraph, GraphCheckError, Operation, TorchExecutor, Variable,
                         check_inputs_provided)
from razorlib.ir.graph_check import find_unprovided_outputs
from ir_helpers import conv_relu_graph, structure


def op_names(graph):
    return [op.name for op in graph.topological_sort()]


def test_insert_op_before_cuts_one_input_edge():
    graph = conv_relu_graph()
    conv, x = graph.operations['conv'], graph.variables['x']
    quant = Operation('quant', 'QuantizeLinear')
    between = graph.insert_op_before(quant, conv)
    assert between.name == 'var_0' and graph.variables['var_0'] is between
    assert quant.inputs == [x] and quant.outputs == [between]
    assert conv.inputs[0] is between and between.dest_ops == [conv]
    assert x.dest_ops == [quant] and 'x' in graph.inputs
    assert op_names(graph) == ['quant', 'conv', 'relu']
    graph.check()


def test_insert_op_before_on_a_weight_edge():
    graph = conv_relu_graph()
    conv, w = graph.operations['conv'], graph.variables['w']
    fake = graph.create_operation('FakeQuant', 'fq')
    graph.insert_op_before(fake, conv, input_idx=1)
    assert fake.inputs == [w] and conv.inputs[1] is fake.outputs[0]
    graph.check()


def test_insert_op_before_moves_only_the_chosen_use_of_a_repeated_input():
    graph = BaseGraph()
    x = graph.create_variable('x')
    mul = graph.create_operation('Mul', 'square', inputs=[x, x])
    neg = graph.create_operation('Neg', 'neg')
    graph.insert_op_before(neg, mul, input_idx=1)
    assert mul.inputs[0] is x and mul.inputs[1] is neg.outputs[0]
    assert x.dest_ops.count(mul) == 1 and x.dest_ops.count(neg) == 1
    graph.check()


def test_insert_op_after_keeps_the_output_name():
    graph = conv_relu_graph()
    relu, z = graph.operations['relu'], graph.variables['z']
    graph.create_operation('Sigmoid', 'reader', inputs=[z])
    clip = Operation('clip', 'Clip')
    between = graph.insert_op_after(clip, relu)
    assert relu.outputs == [between] and between.dest_ops == [clip]
    assert clip.outputs == [z] and z.source_op is clip
    assert graph.outputs['z'] is z and [op.name for op in z.dest_ops] == ['reader']
    assert op_names(graph) == ['conv', 'relu', 'clip', 'reader']
    graph.check()


@pytest.mark.parametrize('insert', ['insert_op_before', 'insert_op_after'])
def test_insert_requires_an_unlinked_operation(insert):
    graph = conv_relu_graph()
    before = structure(graph)
    relu, conv = graph.operations['relu'], graph.operations['conv']
    with pytest.raises(ValueError, match="'relu' must be unlinked"):
        getattr(graph, insert)(relu, conv)
    with pytest.raises(ValueError, match="'conv' must be unlinked"):
        getattr(graph, insert)(conv, conv)
    with pytest.raises(ValueError, match="operation 'ghost' is not in graph"):
        getattr(graph, insert)(Operation('new', 'Relu'), Operation('ghost', 'Relu'))
    with pytest.raises(ValueError, match="already has a operation named 'relu'"):
        getattr(graph, insert)(Operation('relu', 'Relu'), conv)
    with pytest.raises(ValueError, match=r"operation 'relu' has 1 \w+s; \w+ index 3"):
        getattr(graph, insert)(Operation('new', 'Relu'), relu, 3)
    assert structure(graph) == before
    assert graph.insert_op_after(Operation('new', 'Relu'), relu).name == 'var_0'


def test_remove_operation_drops_unused_parameters_only():
    graph = conv_relu_graph()
    w, b = graph.variables['w'], graph.variables['b']
    graph.create_operation('Identity', 'keeps_w', inputs=[w])
    conv = graph.operations['conv']
    graph.remove_operation(conv)
    assert 'conv' not in graph.operations and 'b' not in graph.variables
    assert graph.variables['w'] is w and [op.name for op in w.dest_ops] == ['keeps_w']
    assert graph.variables['y'].source_op is None and graph.variables['x'].dest_ops == []
    assert conv.inputs == [] and conv.outputs == [] and b.dest_ops == []
    graph.check()


def test_remove_operation_keeps_a_parameter_that_is_a_graph_output():
    graph = conv_relu_graph()
    graph.mark_variable_as_graph_output(graph.variables['b'])
    graph.remove_operation(graph.operations['conv'])
    assert 'b' in graph.variables and 'w' not in graph.variables
    graph.check()


def test_remove_operation_with_coherence_bypasses_it():
    graph = conv_relu_graph()
    y, relu = graph.variables['y'], graph.operations['relu']
    graph.remove_operation(relu, keep_coherence=True)
    assert 'z' not in graph.variables and list(graph.outputs) == ['y']
    assert graph.outputs['y'] is y and y.dest_ops == []
    graph.check()


def test_remove_operation_with_coherence_rewires_consumers_and_keeps_parameters_out():
    graph = conv_relu_graph()
    relu = graph.operations['relu']
    z = graph.variables['z']
    add = graph.create_operation('Add', 'add', inputs=[z, z])
    graph.remove_operation(relu, keep_coherence=True)
    y = graph.variables['y']
    assert add.inputs == [y, y] and y.dest_ops == [add, add]
    prelu = graph.create_operation('PRelu', 'prelu', inputs=[
        y, graph.create_variable('slope', torch.ones(1), is_parameter=True)],
        outputs=[graph.create_variable('p')])
    graph.create_operation('Relu', 'tail', inputs=[graph.variables['p']])
    graph.remove_operation(prelu, keep_coherence=True)
    assert 'slope' not in graph.variables and 'p' not in graph.variables
    assert graph.operations['tail'].inputs == [y]
    graph.check()


def test_remove_operation_with_coherence_rejects_many_inputs_or_a_self_loop():
    graph = BaseGraph()
    a, b, out = (graph.create_variable(name) for name in 'abo')
    add = graph.create_operation('Add', 'add', inputs=[a, b], outputs=[out])
    before = structure(graph)
    with pytest.raises(ValueError, match="operation 'add' reads 2 non-parameter"):
        graph.remove_operation(add, keep_coherence=True)
    loop_var = graph.create_variable('loop')
    loop = graph.create_operation('Identity', 'loop_op', outputs=[loop_var])
    graph.create_link_with_op(loop, loop, loop_var)
    with pytest.raises(ValueError, match="'loop_op' reads 1 non-parameter.*off a cycle"):
        graph.remove_operation(loop, keep_coherence=True)
    graph.remove_operation(loop)
    graph.remove_variable(loop_var)
    assert structure(graph) == before


def test_remove_operation_with_coherence_refuses_to_merge_two_graph_outputs():
    graph = conv_relu_graph()
    graph.mark_variable_as_graph_output(graph.variables['y'])  # outputs z = relu(y), y
    before = structure(graph)
    with pytest.raises(ValueError, match="operation 'relu' cannot be removed with "
                       "keep_coherence=True: its input 'y' and output 'z' are both graph "
                       "outputs, and the graph would return one tensor fewer"):
        graph.remove_operation(graph.operations['relu'], keep_coherence=True)
    assert structure(graph) == before


def test_remove_operation_with_coherence_lets_a_graph_input_become_an_output():
    graph = conv_relu_graph()
    graph.remove_operation(graph.operations['relu'])
    identity = graph.create_operation('Identity', 'id', inputs=[graph.variables['x']],
                                      outputs=[graph.variables['z']])
    graph.remove_operation(identity, keep_coherence=True)
    assert list(graph.inputs) == ['x'] and list(graph.outputs) == ['x']
    graph.check()


def test_a_graph_output_nothing_provides_is_reported_and_cannot_run():
    graph = conv_relu_graph()
    graph.remove_operation(graph.operations['relu'])  # z stays a graph output
    assert [var.name for var in find_unprovided_outputs(graph)] == ['z']
    graph.check()  # coherent: a plain removal leaves the outputs of the operation in place
    message = "graph 'net': graph output 'z', which no operation produces, has no value"
    with pytest.raises(ValueError, match=message):
        check_inputs_provided(graph)
    with pytest.raises(ValueError, match=message):
        TorchExecutor(graph)


def test_remove_operation_not_in_graph():
    with pytest.raises(ValueError, match="operation 'conv' is not in graph 'other'"):
        BaseGraph('other').remove_operation(conv_relu_graph().operations['conv'])


def test_remove_variable_detaches_it_everywhere():
    graph = conv_relu_graph()
    conv, w = graph.operations['conv'], graph.variables['w']
    graph.remove_variable(w)
    assert [v.name for v in conv.inputs] == ['x', 'b']
    assert w.dest_ops == [] and 'w' not in graph.variables
    graph.remove_variable(graph.variables['z'])
    assert graph.operations['relu'].outputs == [] and graph.outputs == {}
    graph.remove_variable(graph.variables['x'])
    assert graph.inputs == {}
    graph.check()
    with pytest.raises(ValueError, match="variable 'w' is not in graph 'net'"):
        graph.remove_variable(w)


def test_create_link_with_op_makes_a_variable():
    graph = conv_relu_graph()
    conv, relu = graph.operations['conv'], graph.operations['relu']
    link = graph.create_link_with_op(conv, relu)
    assert link.name == 'var_0' and conv.outputs[-1] is link and relu.inputs[-1] is link
    assert link.source_op is conv and link.dest_ops == [relu]
    graph.check()


def test_create_link_with_op_reuses_a_produced_or_unproduced_variable():
    graph = conv_relu_graph()
    conv, relu = graph.operations['conv'], graph.operations['relu']
    y = graph.variables['y']
    assert graph.create_link_with_op(conv, relu, y) is y
    assert relu.inputs == [y, y] and y.dest_ops == [relu, relu] and conv.outputs == [y]
    free = graph.create_variable('free')
    graph.create_link_with_op(relu, conv, free)
    assert free.source_op is relu and relu.outputs[-1] is free and conv.inputs[-1] is free
    graph.check()


def test_create_link_with_op_errors_name_the_variable():
    graph = conv_relu_graph()
    conv, relu = graph.operations['conv'], graph.operations['relu']
    before = structure(graph)
    with pytest.raises(ValueError, match="'z' is produced by operation 'relu', not 'conv'"):
        graph.create_link_with_op(conv, relu, graph.variables['z'])
    with pytest.raises(ValueError, match="'x' is a graph input"):
        graph.create_link_with_op(conv, relu, graph.variables['x'])
    with pytest.raises(ValueError, match="variable 'ghost' is not in graph"):
        graph.create_link_with_op(conv, relu, Variable('ghost'))
    with pytest.raises(ValueError, match="operation 'ghost' is not in graph"):
        graph.create_link_with_op(conv, Operation('ghost', 'Relu'))
    assert structure(graph) == before


def test_create_link_with_var_merges_consumers_and_outputs():
    graph = conv_relu_graph()
    y = graph.variables['y']
    detached = graph.create_variable('detached')
    reader = graph.create_operation('Mul', 'reader', inputs=[detached, y, detached])
    graph.mark_variable_as_graph_output(detached)
    graph.mark_variable_as_graph_input(detached)
    assert graph.create_link_with_var(y, detached) is y
    assert reader.inputs == [y, y, y]
    assert [op.name for op in y.dest_ops] == ['relu', 'reader', 'reader', 'reader']
    assert 'detached' not in graph.variables and list(graph.inputs) == ['x']
    assert list(graph.outputs) == ['z', 'y']
    graph.check()


def test_create_link_with_var_keeps_an_output_listed_earlier():
    graph = conv_relu_graph()
    extra = graph.create_variable('extra')
    graph.mark_variable_as_graph_output(extra)
    graph.create_link_with_var(graph.variables['z'], extra)
    assert list(graph.outputs) == ['z']
    graph.check()


def test_create_link_with_var_errors():
    graph = conv_relu_graph()
    y, z = graph.variables['y'], graph.variables['z']
    with pytest.raises(ValueError, match="'z' is produced by operation 'relu'"):
        graph.create_link_with_var(y, z)
    with pytest.raises(ValueError, match="cannot merge variable 'y' into itself"):
        graph.create_link_with_var(y, y)


def test_replace_input_moves_one_read_only():
    graph = conv_relu_graph()
    w = graph.variables['w']
    square = graph.create_operation('Mul', 'square', inputs=[w, w])
    other = graph.create_variable('other', torch.ones(4, 3, 3, 3), is_parameter=True)
    assert graph.replace_input(square, 1, other) is w
    assert square.inputs == [w, other] and other.dest_ops == [square]
    assert [op.name for op in w.dest_ops] == ['conv', 'square']
    graph.check()


def test_replace_input_errors_leave_the_graph_as_it_was():
    graph = conv_relu_graph()
    conv, before = graph.operations['conv'], structure(graph)
    with pytest.raises(ValueError, match="has 3 inputs; input index 3 is out of range"):
        graph.replace_input(conv, 3, graph.variables['x'])
    with pytest.raises(ValueError, match="variable 'ghost' is not in graph"):
        graph.replace_input(conv, 0, Variable('ghost'))
    with pytest.raises(ValueError, match="operation 'ghost' is not in graph"):
        graph.replace_input(Operation('ghost', 'Relu'), 0, graph.variables['x'])
    assert structure(graph) == before


def test_topological_sort_is_stable_and_follows_dependencies():
    graph = BaseGraph()
    late = graph.create_variable('late')
    consumer = graph.create_operation('Relu', 'consumer', inputs=[late])
    graph.create_operation('Sigmoid', 'independent')
    graph.create_operation('Conv', 'producer', outputs=[late])
    assert [op.name for op in graph.topological_sort()] == ['independent', 'producer', 'consumer']
    graph.operations = {op.name: op for op in graph.topological_sort()}
    assert [op.name for op in graph.topological_sort()] == ['independent', 'producer', 'consumer']
    assert consumer in graph.get_downstream_operations(graph.operations['producer'])


def test_topological_sort_names_the_operations_on_a_cycle():
    graph = conv_relu_graph()
    graph.create_operation('Sigmoid', 'after', inputs=[graph.variables['x']])
    graph.create_link_with_op(graph.operations['relu'], graph.operations['conv'])
    with pytest.raises(ValueError, match=r"cycle: operations \['conv', 'relu'\]"):
        graph.topological_sort()


def corrupt(edit):
    graph = conv_relu_graph()
    edit(graph)
    with pytest.raises(GraphCheckError) as info:
        graph.check()
    return info.value


@pytest.mark.parametrize('edit,expected', [
    (lambda g: g.operations.__setitem__('other', g.operations.pop('relu')),
     "operation 'relu' is stored under the key 'other'"),
    (lambda g: setattr(g.variables['y'], 'name', 'renamed'),
     "variable 'renamed' is stored under the key 'y'"),
    (lambda g: g.inputs.__setitem__('ghost', Variable('ghost')),
     "graph input 'ghost' is not a variable of the graph"),
    (lambda g: g.outputs.__setitem__('ghost', Variable('ghost')),
     "graph output 'ghost' is not a variable of the graph"),
    (lambda g: g.inputs.__setitem__('z', g.variables['z']),
     "graph input 'z' is produced by operation 'relu'"),
    (lambda g: g.operations['relu'].inputs.append(Variable('stray')),
     "operation 'relu' has input 'stray', which is not a variable of the graph"),
    (lambda g: g.operations['relu'].outputs.append(g.variables['z']),
     "operation 'relu' lists output 'z' 2 times"),
    (lambda g: setattr(g.variables['z'], 'source_op', g.operations['conv']),
     "operation 'relu' has output 'z', whose source_op is 'conv'"),
    (lambda g: setattr(g.variables['x'], 'source_op', Operation('ghost', 'Relu')),
     "variable 'x' has source_op 'ghost', which is not an operation of the graph"),
    (lambda g: g.variables['y'].dest_ops.append(Operation('ghost', 'Relu')),
     "variable 'y' has dest_op 'ghost', which is not an operation of the graph"),
    (lambda g: g.variables['y'].dest_ops.append(g.operations['relu']),
     "operation 'relu' reads variable 'y' 1 time(s) but the variable lists it in dest_ops 2"),
    (lambda g: g.variables['w'].dest_ops.clear(),
     "operation 'conv' reads variable 'w' 1 time(s) but the variable lists it in dest_ops 0"),
])
def test_check_names_each_broken_invariant(edit, expected):
    error = corrupt(edit)
    assert isinstance(error, ValueError)
    assert any(expected in problem for problem in error.problems), error.problems
    assert expected in str(error) and "graph 'net' breaks" in str(error)


def test_check_reports_a_source_op_that_does_not_list_the_variable():
    def edit(graph):
        graph.operations['relu'].outputs.clear()
    error = corrupt(edit)
    assert error.problems == [
        "variable 'z' has source_op 'relu', which does not list it among its outputs"]


def test_check_reports_every_problem_at_once():
    def edit(graph):
        graph.variables['y'].dest_ops.clear()
        graph.outputs['ghost'] = Variable('ghost')
    assert len(corrupt(edit).problems) == 2
