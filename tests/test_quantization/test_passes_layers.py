"""The pair walk of the equalization and centring passes (passes/layers.py): which ops are
channel layers, when an op has one reader, and which Clips have constant bounds."""
import torch

from razorlib.ir import BaseGraph
from razorlib.quantization.passes.layers import (clip_bounds, clip_from_zero, is_channel_layer,
                                                 sole_reader)


def gemm(attributes=None, weight=torch.ones(4, 3), parameter=True):
    graph = BaseGraph()
    w = graph.create_variable('w', weight, is_parameter=parameter)
    return graph.create_operation('Gemm', 'gemm', attributes or {},
                                  inputs=[graph.create_variable('x'), w],
                                  outputs=[graph.create_variable('y')])


def test_a_channel_layer_is_a_conv_or_an_untransposed_gemm_with_a_parameter_weight():
    assert is_channel_layer(gemm())
    assert is_channel_layer(gemm({'transB': 1}))
    assert not is_channel_layer(gemm({'transA': 1}))  # its channels are not input 0's last
    assert not is_channel_layer(gemm(weight=torch.ones(2, 4, 3)))
    assert not is_channel_layer(gemm(parameter=False))  # a weight computed at run time
    graph = BaseGraph()
    x = graph.create_variable('x')
    w = graph.create_variable('w', torch.ones(4, 3), is_parameter=True)
    assert not is_channel_layer(graph.create_operation('MatMul', inputs=[x, w]))
    assert not is_channel_layer(graph.create_operation('Conv', inputs=[x]))


def test_a_layer_that_shares_its_weight_or_bias_is_no_channel_layer():
    """The passes rewrite a channel layer's parameters in place: a module called twice,
    exported without the format passes that copy its parameters per call, would change at
    its other call too."""
    graph = BaseGraph()
    x = graph.create_variable('x')
    w = graph.create_variable('w', torch.ones(4, 3, 1, 1), is_parameter=True)
    b = graph.create_variable('b', torch.zeros(4), is_parameter=True)
    first = graph.create_operation('Conv', inputs=[x, w, b])
    assert is_channel_layer(first)
    second = graph.create_operation('Conv', inputs=[x, w])
    assert not is_channel_layer(first) and not is_channel_layer(second)
    w3 = graph.create_variable('w3', torch.ones(4, 3, 1, 1), is_parameter=True)
    third = graph.create_operation('Conv', inputs=[x, w3, b])
    assert not is_channel_layer(third)  # the bias is first's too


def producer_of_y(readers: int, output: bool = False):
    """A graph whose op 'first' writes y, read by ``readers`` ops, y a graph output or not."""
    graph = BaseGraph()
    y = graph.create_variable('y')
    first = graph.create_operation('Relu', 'first', inputs=[graph.create_variable('x')],
                                   outputs=[y])
    ops = [graph.create_operation('Relu', f'reader{i}', inputs=[y],
                                  outputs=[graph.create_variable(f'z{i}')])
           for i in range(readers)]
    if output:
        graph.mark_variable_as_graph_output(y)
    return graph, first, ops


def test_sole_reader_needs_one_reader_of_an_output_that_stays_in_the_graph():
    graph, first, (reader, ) = producer_of_y(1)
    assert sole_reader(graph, first) is reader
    for readers, output in ((0, False), (2, False), (1, True)):  # the user sees y too
        graph, first, _ = producer_of_y(readers, output)
        assert sole_reader(graph, first) is None


def clip_maker():
    """A function that adds ``Clip(x, low, high)`` to a graph (None: a run-time bound)."""
    graph = BaseGraph()
    x = graph.create_variable('x')

    def clip(low, high):
        inputs = [x] + [graph.create_variable(value=None if v is None else torch.tensor(v))
                        for v in (low, high)]
        return graph.create_operation('Clip', inputs=inputs)
    return graph, x, clip


def test_clip_bounds_are_those_of_a_clip_with_two_scalar_constants():
    graph, x, clip = clip_maker()
    assert clip_bounds(clip(0.0, 6.0)) == (0.0, 6.0)
    assert clip_bounds(clip(-1.5, 4.5)) == (-1.5, 4.5)
    assert clip_bounds(clip(0.0, None)) is None  # a bound computed at run time
    assert clip_bounds(clip(0.0, [6.0, 6.0])) is None
    assert clip_bounds(graph.create_operation('Clip', inputs=[x])) is None  # opset 6 attrs
    assert clip_bounds(graph.create_operation('Relu', inputs=[x])) is None


def test_clip_from_zero_is_the_upper_bound_of_a_clip_from_zero_to_above_it():
    _, _, clip = clip_maker()
    assert clip_from_zero(clip(0.0, 6.0)) == 6.0
    assert clip_from_zero(clip(0.0, 0.5)) == 0.5
    assert clip_from_zero(clip(-3.0, 3.0)) is None  # a centred ReLU6: 0 is not a bound
    assert clip_from_zero(clip(0.0, 0.0)) is None  # constant zero output
    assert clip_from_zero(clip(0.0, None)) is None
