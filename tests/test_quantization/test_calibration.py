"""calibrate: observers per config set over N batches, rendered scales, passive biases."""
import logging

import pytest
import torch

from razorlib.ir import QuantizationStates, TorchExecutor
from razorlib.quantization import calibrate, quantize_graph, set_activation_observer
from ptq_helpers import batches, float_graph
from quant_graphs import GraphBuilder

S = QuantizationStates


def minmax_graph(platform='TRT_INT8'):
    graph = quantize_graph(float_graph(), platform, 'aggressive')
    set_activation_observer(graph, 'minmax')
    return graph


def test_every_config_leaves_the_initial_state():
    graph = minmax_graph('ORT_INT8')
    calibrate(graph, batches(3), progress=False)
    states = {config.state for op in graph.operations.values()
              for config, _ in getattr(op, 'config_with_variable', ())}
    assert S.INITIAL not in states
    assert {S.ACTIVATED, S.OVERLAPPED, S.PASSIVE} <= states


def test_activation_scale_is_the_range_over_all_batches():
    graph = minmax_graph()
    data = batches(3)
    relu = next(op for op in graph.topological_sort() if op.type == 'Relu')
    reference = TorchExecutor(graph.copy())
    largest = max(float(reference(x, [relu.outputs[0].name])[0].abs().max()) for x in data)
    calibrate(graph, data, progress=False)
    assert relu.output_quant_config[0].scale.item() == pytest.approx(largest / 127, rel=1e-6)


def test_weights_are_observed_once_per_channel():
    graph = minmax_graph()
    calibrate(graph, batches(2), progress=False)
    conv = next(op for op in graph.topological_sort() if op.type == 'Conv')
    weight = conv.inputs[1].value
    expected = weight.abs().amax((1, 2, 3)) / 127
    assert torch.allclose(conv.input_quant_config[1].scale, expected)


def test_only_the_first_steps_batches_are_drawn():
    drawn = []

    def loader():
        for index, batch in enumerate(batches(5)):
            drawn.append(index)
            yield (batch, index)  # a (data, label) pair

    calibrate(minmax_graph(), loader(), steps=2, collate_fn=lambda pair: pair[0],
              progress=False)
    assert drawn == [0, 1]


def test_progress_bar(capsys):
    calibrate(minmax_graph(), batches(3), steps=8, progress=True)
    assert '3/3' in capsys.readouterr().out


def test_observer_options_reach_the_observers():
    data = batches(1)
    data[0][0, 0, 0, 0] = 50.0  # one outlier
    scales = []
    for percentile in (100.0, 90.0):
        graph = quantize_graph(float_graph(), 'TRT_INT8', 'aggressive')
        calibrate(graph, data, observer_options={'percentile': {'percentile': percentile}},
                  progress=False)
        scales.append(next(iter(graph.operations.values())).input_quant_config[0].scale)
    assert scales[0] > 10 * scales[1]


def test_passive_bias_scale_is_input_scale_times_weight_scale():
    graph = minmax_graph('ORT_INT8')
    calibrate(graph, batches(2), progress=False)
    for op in graph.operations.values():
        if op.type in ('Conv', 'Gemm') and len(op.inputs) == 3:
            data, weight, bias = op.input_quant_config
            assert bias.state is S.PASSIVE and bias.num_of_bits == 32
            assert torch.equal(bias.scale, data.scale * weight.scale)
            assert torch.equal(bias.offset, torch.zeros_like(bias.scale))


def conv_graph(bias_value, input_value=1.0):
    b = GraphBuilder('conv')
    b.param('w', torch.full((2, 1, 1, 1), 0.5))
    b.param('b', torch.full((2, ), bias_value))
    b.op('Conv', 'conv', ['x', 'w', 'b'])
    b.op('Relu', 'relu', ['conv'])
    graph = quantize_graph(b.output('relu'), 'ORT_INT8')
    return graph, [torch.full((1, 1, 2, 2), input_value)]


def test_a_bias_too_large_for_int32_stays_fp32(caplog):
    graph, data = conv_graph(bias_value=1e6, input_value=1e-3)
    with caplog.at_level(logging.WARNING):
        calibrate(graph, data, progress=False)
    assert graph.operations['conv'].input_quant_config[2].state is S.FP32
    assert 'overflows 32 bits' in caplog.text


def test_an_activation_that_is_always_zero_stays_fp32(caplog):
    graph, data = conv_graph(bias_value=-10.0)  # relu(0.5 - 10) == 0
    with caplog.at_level(logging.WARNING):
        calibrate(graph, data, progress=False)
    assert graph.operations['relu'].output_quant_config[0].state is S.FP32
    assert graph.operations['conv'].input_quant_config[0].state is S.ACTIVATED
    assert 'saw only zeros' in caplog.text


def test_a_bias_whose_layer_input_is_fp32_stays_fp32():
    graph, data = conv_graph(bias_value=1.0)
    graph.operations['conv'].input_quant_config[0].state = S.FP32
    calibrate(graph, data, progress=False)
    assert graph.operations['conv'].input_quant_config[2].state is S.FP32


def test_steps_must_be_positive():
    with pytest.raises(ValueError, match='^steps must be at least 1, got 0$'):
        calibrate(minmax_graph(), batches(1), steps=0, progress=False)


def test_unknown_observer_is_refused():
    with pytest.raises(KeyError, match="no observer 'median'"):
        set_activation_observer(minmax_graph(), 'median')
    with pytest.raises(KeyError, match="no observer 'median'"):
        calibrate(minmax_graph(), [torch.ones(2)], observer_options={'median': {}})


def test_in_place_functions_return_their_graph_so_calls_chain():
    from razorlib.quantization import (bake_parameters, dequantize_graph, dispatch_graph,
                                       render_passive_configs, restore_quantize_state)
    graph = float_graph()
    assert dispatch_graph(graph, 'TRT_INT8') is graph
    graph = float_graph()
    assert quantize_graph(graph, 'ORT_INT8') is graph
    assert set_activation_observer(graph, 'minmax') is graph
    assert calibrate(graph, batches(2), progress=False) is graph
    for function in (render_passive_configs, bake_parameters, dequantize_graph,
                     restore_quantize_state):
        assert function(graph) is graph, function.__name__


def test_a_nan_activation_or_weight_is_named_by_tensor_and_operation():
    graph = minmax_graph()
    data = batches(2)
    data[1][0, 0, 0, 0] = float('nan')
    conv = next(op for op in graph.topological_sort() if op.type == 'Conv')
    with pytest.raises(ValueError, match='MinMaxObserver: the tensor holds inf or nan') as info:
        calibrate(graph, data, progress=False)
    assert (f"calibrate: while observing input 0 ({conv.inputs[0].name!r}) of op "
            f"{conv.name!r}") in info.value.__notes__
    graph = minmax_graph()
    conv = next(op for op in graph.topological_sort() if op.type == 'Conv')
    conv.inputs[1].value[0, 0, 0, 0] = float('inf')
    with pytest.raises(ValueError, match='inf or nan') as info:
        calibrate(graph, batches(1), progress=False)
    assert info.value.__notes__ == [
        f"calibrate: while observing parameter {conv.inputs[1].name!r} of op {conv.name!r}"]


class ConstantFirst(torch.nn.Module):
    """A learned position term added before the activation: on TRT_INT8 the Add's inputs
    share one scale, whose set root is the constant's config."""

    def __init__(self):
        super().__init__()
        self.pos = torch.nn.Parameter(torch.zeros(1, 3, 4, 4))
        self.conv = torch.nn.Conv2d(3, 4, 1)

    def forward(self, x):
        return self.conv(self.pos + x)


@pytest.mark.parametrize('observer', ['minmax', 'mse', 'kl'])  # percentile: the default
def test_a_set_rooted_at_a_constant_takes_the_activation_observer(observer):
    from razorlib.ir import from_torch
    x = torch.randn(4, 3, 4, 4, generator=torch.Generator().manual_seed(0))
    graph = set_activation_observer(
        quantize_graph(from_torch(ConstantFirst(), x), 'TRT_INT8', 'aggressive'), observer)
    add = next(op for op in graph.operations.values() if op.type == 'Add')
    assert add.input_quant_config[1].dominated_by is add.input_quant_config[0]
    assert add.input_quant_config[0].observer_algorithm == observer
