"""Shape-or-index subgraphs: found forward from index producers, backward from control inputs."""
import torch

from razorlib.quantization.dispatch import find_soi_operations, is_index_producer

from quant_graphs import GraphBuilder, dispatcher_graph, soi_onnx_graph


def soi_names(graph):
    return [op.name for op in find_soi_operations(graph)]


def test_shape_gather_concat_reshape_and_resize_scales_from_onnx():
    graph = soi_onnx_graph()
    assert set(soi_names(graph)) == {
        'shape', 'gather', 'unsqueeze', 'constant', 'concat',  # -> Reshape.shape
        'big_shape_op', 'big_slice', 'big_cast', 'r_slice', 'r_cast', 'div',
        'scales_concat',  # -> Resize.scales
    }


def test_data_ops_stay_out_of_soi():
    soi = set(soi_names(soi_onnx_graph()))
    assert not soi & {'conv', 'relu', 'reshape', 'resize', 'add'}


def test_result_is_in_topological_order():
    graph = soi_onnx_graph()
    order = [op.name for op in graph.topological_sort()]
    names = soi_names(graph)
    assert names == sorted(names, key=order.index)


def test_index_producer_does_not_pull_its_input_into_soi():
    # conv's only reader is Shape: Shape reads the shape, not the data.
    b = GraphBuilder()
    b.param('w', torch.randn(2, 1, 1, 1))
    b.op('Conv', 'conv', ['x', 'w'])
    b.op('Shape', 'shape', ['conv'])
    b.op('Reshape', 'reshape', ['x', 'shape'])
    graph = b.output('reshape')
    assert soi_names(graph) == ['shape']
    assert is_index_producer(graph.operations['shape'])
    assert not is_index_producer(graph.operations['conv'])


def test_values_computed_from_shapes_are_soi_even_when_they_feed_data():
    # x * (1 / sqrt(size of axis 1)): the scalar is computed from a shape only.
    b = GraphBuilder()
    b.param('one', torch.tensor(1))
    b.op('Shape', 'shape', ['x'])
    b.op('Gather', 'gather', ['shape', 'one'])
    b.op('Cast', 'cast', ['gather'], {'to': 1})
    b.op('Sqrt', 'sqrt', ['cast'])
    b.op('Mul', 'mul', ['x', 'sqrt'])
    graph = b.output('mul')
    assert soi_names(graph) == ['shape', 'gather', 'cast', 'sqrt']


def test_backward_sweep_stops_at_data_read_elsewhere():
    # ReduceMax only bounds a Clip: SOI.  Its input is also the Clip's data: not SOI.
    b = GraphBuilder()
    b.op('Relu', 'relu', ['x'])
    b.op('ReduceMax', 'bound', ['relu'], {'keepdims': 0})
    b.param('low', torch.tensor(0.0))
    b.op('Clip', 'clip', ['relu', 'low', 'bound'])
    graph = b.output('clip')
    assert soi_names(graph) == ['bound']


def test_an_op_writing_a_graph_output_is_not_soi_by_the_backward_sweep():
    b = GraphBuilder()
    b.op('Relu', 'relu', ['x'])
    b.op('Reshape', 'reshape', ['x', 'relu'])
    graph = b.output('reshape', 'relu')
    assert soi_names(graph) == []


def test_dispatcher_graph_soi():
    assert soi_names(dispatcher_graph()) == ['shape', 'gather', 'concat']
