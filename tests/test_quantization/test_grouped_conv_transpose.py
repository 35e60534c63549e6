"""A grouped ConvTranspose: its weight (in, out / group, k...) has no axis of output channels,
so quantizers quantize it (and its bias) per tensor; calibration, the QDQ export and
onnxruntime agree with the executor."""
import logging

import pytest
import torch
from onnx import numpy_helper
from torch import nn

from razorlib.ir import QuantizationStates
from razorlib.quantization import (ORTQDQQuantizer, QuantExecutor, TensorRTQuantizer, calibrate,
                                   export_graph, quantize_graph, quantize_torch_model,
                                   render_passive_configs)
from ptq_helpers import STEPS, batches, float_graph, run_onnxruntime, worst_steps

SHAPE = (2, 4, 5, 5)


def deconv_net(groups):
    """The fuzzed layer (4 -> 6 channels, 2x2 stride 2), a ReLU and a second grouped one; the
    first group's weights are 10 times the second's, so a scale shared across groups shows."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.ConvTranspose2d(4, 6, 2, stride=2, groups=groups), nn.ReLU(),
                        nn.ConvTranspose2d(6, 4, 3, groups=groups)).eval()
    with torch.no_grad():
        net[0].weight[:4 // groups] *= 10
    return net


def deconvs(graph):
    return [op for op in graph.operations.values() if op.type == 'ConvTranspose']


@pytest.mark.parametrize('quantizer', [TensorRTQuantizer, ORTQDQQuantizer])
def test_a_grouped_conv_transpose_weight_is_per_tensor_and_the_reason_logged(
        quantizer, caplog):
    for groups, weight_axis in [(1, 1), (2, None)]:
        graph = float_graph(deconv_net(groups), torch.randn(SHAPE))
        name = deconvs(graph)[0].name
        with caplog.at_level(logging.INFO, logger='razorlib.quantization.quantizers'):
            op = quantizer(graph).quantize_operation(name)
        weight, bias = op.input_quant_config[1:]
        assert weight.channel_axis == weight_axis
        if quantizer is ORTQDQQuantizer:
            assert bias.channel_axis == (None if weight_axis is None else 0)
        logged = (f"{quantizer.__name__}: ConvTranspose {name!r} has group 2: its weight (in, "
                  'out / group, k...) has no axis of output channels')
        assert (logged in caplog.text) == (groups == 2)
        caplog.clear()


def test_the_fuzzed_grouped_conv_transpose_calibrates_on_onnxruntime():
    # used to fail: 'The size of tensor a (6) must match the size of tensor b (3)'
    torch.manual_seed(0)
    net = nn.Sequential(nn.ConvTranspose2d(4, 6, 2, stride=2, groups=2)).eval()
    data = [torch.randn(SHAPE) for _ in range(2)]
    graph = quantize_torch_model(net, data, data[0], platform='ORT_INT8', progress=False)
    data_config, weight, bias = deconvs(graph)[0].input_quant_config
    assert (weight.scale.shape, bias.scale.shape, bias.state) == (
        (), (), QuantizationStates.PASSIVE)
    assert torch.equal(bias.scale, data_config.scale * weight.scale)


@pytest.mark.parametrize('platform', ['TRT_INT8', 'ORT_INT8'])
@pytest.mark.parametrize('groups', [1, 2])
def test_onnxruntime_agrees_with_the_executor_on_conv_transposes(groups, platform, tmp_path):
    net = deconv_net(groups)
    graph = quantize_graph(float_graph(net, torch.randn(SHAPE)), platform)
    calibrate(graph, batches(3, SHAPE), progress=False)
    model = export_graph(graph, tmp_path / 'deconv.onnx')
    values = {item.name: numpy_helper.to_array(item) for item in model.graph.initializer}
    producers = {name: node for node in model.graph.node for name in node.output}
    for op in deconvs(graph):
        node = next(node for node in model.graph.node if node.name == op.name)
        dequantize = producers[node.input[1]]
        scale = values[dequantize.input[1]]
        # groups=1: one scale per output channel, on axis 1; grouped: one scale
        assert scale.shape == ((op.inputs[1].value.shape[1], ) if groups == 1 else ())
    for x in batches(3, SHAPE, seed=11):
        ours = QuantExecutor(graph)(x)
        for optimized in (False, True):
            assert worst_steps(graph, ours, run_onnxruntime(model, [x], optimized)) <= STEPS
        with torch.no_grad():  # and the simulation is close to FP32 (measured 31 to 37 dB)
            reference = net(x)
        snr = 10 * torch.log10(reference.square().mean() / (ours[0] - reference).square().mean())
        assert snr > 25


def test_a_per_channel_weight_scale_that_does_not_fit_the_bias_leaves_it_fp32(caplog):
    # a config set by hand per channel on axis 1 of a grouped ConvTranspose: 3 scales, 6
    # output channels; the bias stays FP32 (logged) where it used to fail to broadcast
    graph = quantize_graph(float_graph(deconv_net(2), torch.randn(SHAPE)), 'ORT_INT8')
    op = deconvs(graph)[0]
    data, weight, bias = op.input_quant_config
    data.scale, data.offset = torch.tensor(0.1), torch.tensor(0.)
    weight.scale, weight.offset = torch.full((3, ), 0.01), torch.zeros(3)
    weight.channel_axis = 1
    bias.channel_axis = 0
    for config in (data, weight):
        config.state = QuantizationStates.ACTIVATED
    with caplog.at_level(logging.WARNING, logger='razorlib.quantization.calibration'):
        render_passive_configs(graph)
    assert bias.state is QuantizationStates.FP32
    assert (f"calibrate: the bias of ConvTranspose {op.name!r} has 6 channels, its input x "
            'weight scale 3 values; it stays FP32') in caplog.text
