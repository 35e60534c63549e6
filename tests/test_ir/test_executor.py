"""TorchExecutor: errors that name the node, hooks, tracing metadata, inputs and their
shapes, devices."""
import numpy as np
import pytest
import torch

from razorlib.ir import (BaseGraph, TorchExecutor, UnsupportedOperationError,
                         find_unprovided_inputs, from_torch)
from razorlib.ir.executor import KERNELS, OP_TABLE, register_function
from razorlib.ir.executor.shapes import InputShapeError
from pass_helpers import node, onnx_graph
from zoo import ZOO


def _chain(*op_types, name='chain'):
    """x -> op_types[0] -> ... -> output, the operations created last to first."""
    graph = BaseGraph(name)
    names = ['x'] + [f'v{index}' for index in range(len(op_types))]
    variables = [graph.create_variable(var_name) for var_name in names]
    graph.mark_variable_as_graph_input(variables[0])
    for index in reversed(range(len(op_types))):
        graph.create_operation(op_types[index], f'op{index}', inputs=[variables[index]],
                               outputs=[variables[index + 1]])
    graph.mark_variable_as_graph_output(variables[-1])
    return graph


def test_unknown_op_type_fails_naming_type_and_node():
    graph = _chain('Relu', 'FooBar')
    with pytest.raises(UnsupportedOperationError, match="'FooBar'.*'op1'") as error:
        TorchExecutor(graph)
    assert isinstance(error.value, NotImplementedError)
    assert (error.value.op_type, error.value.node) == ('FooBar', 'op1')


def test_ops_of_other_domains_need_their_own_entry(monkeypatch):
    graph = _chain('Relu')
    graph.operations['op0'].opset = type(graph.operations['op0'].opset)(1, 'com.example')
    with pytest.raises(UnsupportedOperationError, match="domain 'com.example'"):
        TorchExecutor(graph)
    monkeypatch.setitem(OP_TABLE, 'com.example::Relu', OP_TABLE['Neg'])
    assert TorchExecutor(graph)(torch.tensor([2.0]))[0].item() == -2.0


@pytest.mark.parametrize('op_type, attributes, detail', [
    ('Resize', {'coordinate_transformation_mode': 'tf_crop_and_resize'}, 'tf_crop_and_resize'),
    ('BatchNormalization', {'training_mode': 1}, 'training mode'),
    ('Pad', {'mode': 'mirror'}, "mode 'mirror'"),
])
def test_unsupported_attributes_fail_naming_the_node(op_type, attributes, detail):
    graph = _chain(op_type)
    graph.operations['op0'].attributes.update(attributes)
    with pytest.raises(UnsupportedOperationError, match=f"{op_type} node 'op0'.*{detail}"):
        TorchExecutor(graph)


def test_a_kernel_failure_names_the_operation():
    graph = _chain('Relu', 'Reshape')
    graph.create_variable('shape', torch.tensor([7]), is_parameter=True,
                          dest_ops=[graph.operations['op1']])
    with pytest.raises(RuntimeError, match="Reshape operation 'op1' of graph 'chain' failed"):
        TorchExecutor(graph)(torch.zeros(2, 3))


def test_an_input_nothing_provides_is_refused():
    graph = _chain('Add')
    graph.create_variable('ghost', dest_ops=[graph.operations['op0']])
    graph.create_variable('', dest_ops=[graph.operations['op0']])  # absent: provided as None
    assert [(op.name, var.name) for op, var in find_unprovided_inputs(graph)] == [
        ('op0', 'ghost')]
    with pytest.raises(ValueError, match="'op0' reads 'ghost', which no operation produces"):
        TorchExecutor(graph)


def test_hooks_run_around_every_operation_in_topological_order():
    graph = _chain('Relu', 'Neg', 'Sigmoid')
    executor = TorchExecutor(graph)
    events = []
    executor.register_forward_pre_hook(lambda op, inputs: events.append(('pre', op.name)))
    executor.register_forward_hook(lambda op, inputs, outputs: events.append(('post', op.name)))
    second = executor.register_forward_hook(lambda op, inputs, outputs: events.append(('2nd', )))
    executor(torch.zeros(1))
    assert events == [('pre', 'op0'), ('post', 'op0'), ('2nd', ), ('pre', 'op1'),
                      ('post', 'op1'), ('2nd', ), ('pre', 'op2'), ('post', 'op2'), ('2nd', )]
    events.clear()
    second.remove()
    executor(torch.zeros(1))
    assert ('2nd', ) not in events and len(events) == 6


def test_hooks_see_tensors_and_may_replace_them():
    graph = _chain('Relu', 'Neg')
    executor = TorchExecutor(graph)
    seen = []

    def double_relu_input(op, inputs):
        return [inputs[0] * 2] if op.type == 'Relu' else None

    def record(op, inputs, outputs):
        seen.append((op.name, inputs[0].tolist(), outputs[0].tolist()))
        return [outputs[0] + 1] if op.type == 'Neg' else None
    executor.register_forward_pre_hook(double_relu_input)
    executor.register_forward_hook(record)
    assert executor(torch.tensor([-1.0, 3.0]))[0].tolist() == [1.0, -5.0]
    assert seen == [('op0', [-2.0, 6.0], [0.0, 6.0]), ('op1', [0.0, 6.0], [-0.0, -6.0])]


@pytest.fixture(scope='module')
def se_graph():
    torch.manual_seed(0)
    entry = ZOO['se_net']
    return from_torch(entry.build(), entry.example_inputs(), exporter='torchscript'), entry


def test_tracing_operation_meta_fills_every_shape_and_dtype(se_graph):
    graph, entry = se_graph
    graph = graph.copy()
    for var in graph.variables.values():
        var.shape, var.dtype = None, None
    executor = TorchExecutor(graph)
    tensors = {}
    executor.register_forward_hook(
        lambda op, inputs, outputs: tensors.update(zip([v.name for v in op.outputs], outputs)))
    executor.tracing_operation_meta(entry.example_inputs())
    assert graph.variables['input.1'].shape == (1, 3, 32, 32)
    assert tensors and all(graph.variables[name].shape == tuple(tensor.shape)
                           and graph.variables[name].dtype == tensor.dtype
                           for name, tensor in tensors.items())
    assert all(var.shape is not None and var.dtype is not None
               for var in graph.variables.values())


def test_inputs_by_position_or_name_and_any_variable_as_output():
    graph = BaseGraph('two_inputs')
    a, b, c = (graph.create_variable(name) for name in 'abc')
    graph.mark_variable_as_graph_input(a)
    graph.mark_variable_as_graph_input(b)
    graph.create_operation('Sub', 'sub', inputs=[a, b], outputs=[c])
    graph.create_operation('Relu', 'relu', inputs=[c], outputs=[graph.create_variable('d')])
    graph.mark_variable_as_graph_output(graph.variables['d'])
    executor = TorchExecutor(graph)
    one, two = torch.tensor([1.0]), torch.tensor([2.0])
    assert executor([one, two])[0].item() == 0.0
    assert executor({'b': one, 'a': two}, output_names=['c', 'd'])[0].item() == 1.0
    with pytest.raises(ValueError, match='has 2 inputs'):
        executor(one)
    with pytest.raises(ValueError, match=r"inputs \['b'\]"):
        executor({'a': one})
    with pytest.raises(KeyError, match='no variables named'):
        executor([one, two], output_names=['nope'])


def test_parameter_values_are_read_at_every_run():
    graph = _chain('Mul')
    scale = graph.create_variable('scale', torch.tensor(2.0), is_parameter=True,
                                  dest_ops=[graph.operations['op0']])
    executor = TorchExecutor(graph)
    assert executor(torch.tensor([3.0]))[0].item() == 6.0
    scale.value = torch.tensor(-1.0)
    assert executor(torch.tensor([3.0]))[0].item() == -3.0


def test_kernels_registered_at_run_time_are_used(monkeypatch):
    monkeypatch.setitem(OP_TABLE, 'Twice', None)  # removed again after the test
    register_function(lambda x: 2 * x, 'Twice', force=True)
    assert TorchExecutor(_chain('Twice'))(torch.tensor([4.0]))[0].item() == 8.0
    assert KERNELS.get('Twice') is OP_TABLE['Twice']


def test_a_kernel_registered_twice_needs_force(monkeypatch):
    monkeypatch.setitem(OP_TABLE, 'Twice', OP_TABLE['Neg'])
    with pytest.raises(KeyError, match='Twice is already registered in kernel'):
        register_function(lambda x: 2 * x, 'Twice')


@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs CUDA')
def test_runs_on_cuda_like_on_cpu(se_graph):
    graph, entry = se_graph
    expected = TorchExecutor(graph.copy(copy_value=True))(entry.example_inputs())
    got = TorchExecutor(graph.copy(copy_value=True), device='cuda')(entry.example_inputs())
    assert got[0].device.type == 'cuda'
    torch.testing.assert_close(got[0].cpu(), expected[0], rtol=1e-4, atol=1e-5)


def test_input_shapes_are_checked_and_dynamic_axes_kept_by_tracing():
    weight = np.ones((4, 3), np.float32)
    graph = onnx_graph([node('MatMul', ['x', 'w'], 'y'), node('Relu', ['y'], 'out')],
                       {'x': ['batch', 4]}, {'out': None}, {'w': weight})
    executor = TorchExecutor(graph)
    executor.tracing_operation_meta(torch.ones(1, 4))
    assert [graph.variables[name].shape for name in ('x', 'y', 'out')] == [('batch', 4),
                                                                           ('batch', 3),
                                                                           ('batch', 3)]
    assert executor(torch.ones(7, 4))[0].shape == (7, 3)
    with pytest.raises(InputShapeError, match=r"input 'x' expects shape \(batch, 4\), got "
                       r'\(7, 5\); axis 1 is fixed to 4') as error:
        executor(torch.ones(7, 5))
    assert (error.value.input_name, error.value.expected, error.value.given) == (
        'x', ('batch', 4), (7, 5))


def test_a_kernel_error_keeps_its_type_and_names_the_operation(monkeypatch):
    def boom(x):
        raise ZeroDivisionError('no')

    monkeypatch.setitem(OP_TABLE, 'Boom', lambda op, device: boom)
    with pytest.raises(ZeroDivisionError, match='no') as error:
        TorchExecutor(_chain('Relu', 'Boom'))(torch.ones(1))
    assert error.value.__notes__ == ["Boom operation 'op1' of graph 'chain' failed"]
