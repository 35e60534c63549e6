"""QuantExecutor: fake quantization by config state, and bit-exact dequantize/restore."""
import pytest
import torch
import torch.nn.functional as F

from razorlib.ir import QuantizationStates, TorchExecutor
from razorlib.quantization import (QuantExecutor, bake_parameters, dequantize_graph,
                                   fake_quantize, quantable_operations, quantized_inputs,
                                   restore_quantize_state)
from ptq_helpers import batches, calibrated, float_graph
from quant_graphs import GraphBuilder

S = QuantizationStates


def conv_relu(platform):
    b = GraphBuilder('conv_relu')
    torch.manual_seed(0)
    b.param('w', torch.randn(4, 3, 3, 3))
    b.param('b', torch.randn(4))
    b.op('Conv', 'conv', ['x', 'w', 'b'])
    b.op('Relu', 'relu', ['conv'])
    return calibrated(b.output('relu'), platform, data=batches(2))


@pytest.mark.parametrize('platform', ['TRT_INT8', 'ORT_INT8'])
def test_conv_relu_matches_the_hand_computation(platform):
    graph = conv_relu(platform)
    conv, relu = graph.operations['conv'], graph.operations['relu']
    x_config, w_config, b_config = conv.input_quant_config
    x = batches(1, seed=5)[0]
    bias = conv.inputs[2].value
    if platform == 'ORT_INT8':  # int32 bias at input scale x weight scale
        assert b_config.state is S.PASSIVE
        bias = fake_quantize(bias, b_config)
    else:
        assert b_config.state is S.FP32
    y = F.conv2d(fake_quantize(x, x_config), fake_quantize(conv.inputs[1].value, w_config), bias)
    expected = fake_quantize(torch.relu(y), relu.output_quant_config[0])
    assert torch.equal(QuantExecutor(graph)(x)[0], expected)


def test_an_overlapped_output_is_left_to_its_master():
    graph = conv_relu('TRT_INT8')
    seen = {}
    executor = QuantExecutor(graph)
    executor.register_forward_hook(lambda op, inputs, outputs: seen.update({op.name: outputs[0]}))
    executor(batches(1)[0])
    step = graph.operations['relu'].output_quant_config[0].scale

    def on_grid(tensor):
        return torch.allclose(tensor / step, torch.round(tensor / step), atol=1e-4)

    assert graph.operations['conv'].output_quant_config[0].state is S.OVERLAPPED
    assert not on_grid(seen['conv']) and on_grid(seen['relu'])


def test_inputs_quantized_by_their_producer_are_not_quantized_again():
    graph = calibrated(float_graph())
    pool = next(op for op in graph.operations.values() if op.type == 'MaxPool')
    concat = next(op for op in graph.operations.values() if op.type == 'Concat')
    assert quantized_inputs(pool) == [] and quantized_inputs(concat) == []
    first = next(iter(graph.operations.values()))
    assert quantized_inputs(first) == [0, 1]  # the graph input and the weight


def test_run_operation_alone_quantizes_every_input():
    graph = calibrated(float_graph())
    pool = next(op for op in graph.operations.values() if op.type == 'MaxPool')
    x = torch.randn(2, 8, 8, 8)
    config = pool.input_quant_config[0]
    alone, = QuantExecutor(graph).run_operation_alone(pool, [x])
    assert torch.equal(alone, F.max_pool2d(fake_quantize(x, config), 2))


@pytest.mark.parametrize('platform', ['TRT_INT8', 'ORT_INT8'])
def test_baked_parameters_give_the_same_result(platform):
    graph = calibrated(float_graph(), platform)
    x = batches(1, seed=3)[0]
    executor = QuantExecutor(graph)
    at_run_time = executor(x)[0]
    bake_parameters(graph)
    states = {config.state for op in quantable_operations(graph)
              for config in op.input_quant_config}
    assert S.BAKED in states and S.ACTIVATED in states
    assert torch.equal(executor(x)[0], at_run_time)


@pytest.mark.parametrize('bake', [False, True])
@pytest.mark.parametrize('platform', ['TRT_INT8', 'ORT_INT8'])
def test_dequantize_and_restore_are_bit_exact_on_a_whole_graph(platform, bake):
    fp32_graph = float_graph()
    x = batches(1, seed=3)[0]
    fp32 = TorchExecutor(fp32_graph.copy(copy_value=True))(x)[0]
    graph = calibrated(fp32_graph, platform)
    if bake:
        bake_parameters(graph)
    executor = QuantExecutor(graph)
    quantized = executor(x)[0]
    assert not torch.equal(quantized, fp32)
    for _ in range(2):
        dequantize_graph(graph)
        assert torch.equal(executor(x)[0], fp32)
        restore_quantize_state(graph)
        assert torch.equal(executor(x)[0], quantized)


def test_dequantizing_operations_one_by_one_ends_at_fp32():
    fp32_graph = float_graph()
    x = batches(1, seed=3)[0]
    fp32 = TorchExecutor(fp32_graph.copy(copy_value=True))(x)[0]
    graph = calibrated(fp32_graph)
    executor = QuantExecutor(graph)
    quantized = executor(x)[0]
    results = []
    for op in quantable_operations(graph):
        op.dequantize()
        results.append(executor(x)[0])
    assert torch.equal(results[-1], fp32)
    assert not torch.equal(results[0], quantized)  # the first op runs in fp32 already
    for op in quantable_operations(graph):
        op.restore_quantize_state()
    assert torch.equal(executor(x)[0], quantized)


@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs CUDA')
def test_cuda_runs_as_the_cpu():
    graph = calibrated(float_graph(), 'ORT_INT8')
    x = batches(1, seed=3)[0]
    cpu = QuantExecutor(graph)(x)[0]
    cuda = QuantExecutor(graph, 'cuda')(x)[0].cpu()
    assert torch.allclose(cuda, cpu, atol=float(cpu.abs().max()) / 100)
