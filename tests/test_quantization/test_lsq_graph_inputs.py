"""LSQGraph takes only graphs it trains as they run (not baked, nothing left dequantized),
rounds as each config says, and its calibrated graph's FP32 model is the trained one."""
import os

import onnx
import pytest
import torch
from onnx import numpy_helper

from razorlib.ir import RoundingPolicy, TorchExecutor
from razorlib.quantization import (LSQGraph, QuantExecutor, bake_parameters, dequantize_graph,
                                   dequantized, export_graph, lsq_fake_quantize,
                                   quantable_operations, quantize_torch_model)
from razorlib.quantization.passes import keep_in_float


def conv_net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(),
                               torch.nn.Conv2d(8, 4, 3), torch.nn.Flatten(),
                               torch.nn.Linear(4 * 4 * 4, 5)).eval()


def data(count=2, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(8, 3, 8, 8, generator=generator) for _ in range(count)]


def quantized(platform='TRT_INT8', **options):
    batches = data()
    return quantize_torch_model(conv_net(), batches, batches[0], platform, progress=False,
                                **options)


def train(lsq, steps=5):
    """A few Adam steps towards the FP32 net: weights, biases and scales all move."""
    net = conv_net()
    optimizer = torch.optim.Adam([dict(params=lsq.weights.parameters(), lr=1e-2),
                                  dict(params=lsq.scales.parameters(), lr=0.05)])
    for seed in range(steps):
        x = data(1, seed=100 + seed)[0]
        loss = (lsq(x) - net(x).detach()).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return lsq


@pytest.mark.parametrize('platform, ops', [
    ('TRT_INT8', "'node_conv2d', 'node_conv2d_1'"),  # the Linear after Flatten stays FP32
    ('ORT_INT8', "'node_conv2d', 'node_conv2d_1', 'node_linear'")])
def test_a_baked_graph_is_refused_naming_its_operations(platform, ops):
    graph = bake_parameters(quantized(platform))
    # LSQ would quantize the baked values again, QuantExecutor(calibrated_graph()) not:
    # the trained model and the one it hands on differed by 0.04 on outputs up to 0.2
    with pytest.raises(ValueError, match=rf"^LSQGraph: graph .* has baked parameters "
                                         rf"\(bake_parameters; ops {ops}\).*"
                                         r"bake its calibrated_graph\(\)"):
        LSQGraph(graph)


def test_operations_left_dequantized_are_refused_naming_them():
    graph = quantized()
    graph.operations['node_conv2d_1'].dequantize()
    with pytest.raises(ValueError, match=r"^LSQGraph: graph .* has 1 operation\(s\) left "
                                         r"dequantized \('node_conv2d_1'\).*"
                                         r"restore_quantize_state.*keep_in_float"):
        LSQGraph(graph)
    with pytest.raises(ValueError, match='left dequantized'):  # it had 0 scales, silently
        LSQGraph(dequantize_graph(quantized()))
    graph.operations['node_conv2d_1'].restore_quantize_state()
    assert len(LSQGraph(graph).scales) > 0


def test_a_layer_kept_in_float_on_purpose_still_trains():
    graph = quantized()
    keep_in_float(graph.operations['node_conv2d_1'])
    lsq = train(LSQGraph(graph))
    x = data(1, seed=9)[0]
    with torch.no_grad():
        assert torch.equal(QuantExecutor(lsq.calibrated_graph())(x)[0], lsq(x))


def test_lsq_fake_quantize_rounds_as_told():
    x, scale, zero = torch.tensor([0.26, -0.14, 30.0]), torch.tensor(0.1), torch.tensor(0.0)
    down = lsq_fake_quantize(x, scale, zero, -128, 127, rounding=RoundingPolicy.ROUND_DOWN)
    assert torch.allclose(down, torch.tensor([0.2, -0.2, 12.7]))  # floor(2.6), floor(-1.4)
    assert torch.allclose(lsq_fake_quantize(x, scale, zero, -128, 127),
                          torch.tensor([0.3, -0.1, 12.7]))


def test_lsq_rounds_with_each_configs_rounding():
    graph = quantized(dispatcher='allin')
    for op in quantable_operations(graph):
        for config in op.input_quant_config + op.output_quant_config:
            config.rounding = RoundingPolicy.ROUND_DOWN
    lsq = train(LSQGraph(graph))
    x = data(1, seed=9)[0]
    with torch.no_grad():  # torch.round in LSQ: 6 output steps off the executor
        assert torch.equal(QuantExecutor(lsq.calibrated_graph())(x)[0], lsq(x))


@pytest.mark.parametrize('platform', ['TRT_INT8', 'ORT_INT8'])
def test_the_fp32_model_of_a_trained_graph_is_the_trained_float_model(platform, tmp_path):
    graph = quantized(platform, dispatcher='allin', ptq_passes=['BiasCorrection'])
    before = {op.name: op.fp32_parameter(2).clone() for op in quantable_operations(graph)
              if len(op.inputs) > 2}
    trained = train(LSQGraph(graph)).calibrated_graph()
    x = data(1, seed=9)[0]
    with torch.no_grad():
        expected = TorchExecutor(trained.copy(copy_value=True))(x)[0]  # learned values, float
        with dequantized(trained):
            fp32 = QuantExecutor(trained)(x)[0]
    # it put BiasCorrection's pre-QAT biases back beside the trained weights: 0.01 off
    assert torch.equal(fp32, expected)
    model = export_graph(trained, os.path.join(tmp_path, 'fp32.onnx'), 'ONNX')
    written = {item.name: torch.from_numpy(numpy_helper.to_array(item).copy())
               for item in model.graph.initializer}
    for op in quantable_operations(trained):
        for var in op.inputs[1:]:
            if var.is_parameter and var.value.is_floating_point():
                assert torch.equal(written[var.name], var.value), (op.name, var.name)
        if op.name in before:  # the biases did train, away from the values kept aside
            assert not torch.equal(op.inputs[2].value, before[op.name])
    onnx.checker.check_model(model)
