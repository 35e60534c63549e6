"""BiasCorrection: a quantization error with a mean shift per channel loses the shift."""
import logging

import pytest
import torch

from razorlib.ir import from_torch
from razorlib.quantization import (BiasCorrection, QuantExecutor, calibrate, dequantized,
                                   quantize_graph)
from razorlib.quantization.passes import weight_layers


def biased_conv() -> torch.nn.Module:
    """A conv whose weights all sit a third of a step above a grid point (per channel,
    the largest weight is 1.0: the step is 1/127), so rounding lowers every one of them:
    on positive inputs each output channel is shifted down, by a different amount."""
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(4, 6, 3).eval()
    with torch.no_grad():
        conv.weight.copy_(torch.randint(1, 40, conv.weight.shape) + 1 / 3)
        conv.weight.div_(127)
        conv.weight[:, 0, 0, 0] = 1.0
    return conv


def channel_shift(graph, net, images) -> torch.Tensor:
    with torch.no_grad():
        error = QuantExecutor(graph)(images)[0] - net(images)
    return error.mean(dim=(0, 2, 3))


def test_bias_correction_removes_the_shift_and_keeps_the_fp32_bias():
    net = biased_conv()
    batches = [torch.rand(8, 4, 10, 10) for _ in range(4)]
    held_out = torch.rand(32, 4, 10, 10)
    graph = from_torch(net, batches[0], dynamic_batch=True)
    graph = calibrate(quantize_graph(graph, 'TRT_INT8'), batches, progress=False)
    before = channel_shift(graph, net, held_out)
    assert before.abs().min() > 0.02  # every channel is shifted (measured 0.03 to 0.4)
    result = BiasCorrection()(graph, batches)
    assert result.changes == 1
    after = channel_shift(graph, net, held_out)
    assert after.abs().max() < 0.05 * before.abs().max()
    with dequantized(graph), torch.no_grad():  # the FP32 reference is the FP32 model
        assert torch.allclose(QuantExecutor(graph)(held_out)[0], net(held_out), atol=1e-4)


def test_bias_correction_on_onnxruntime_passive_biases():
    net = biased_conv()
    batches = [torch.rand(8, 4, 10, 10) for _ in range(4)]
    graph = from_torch(net, batches[0], dynamic_batch=True)
    graph = calibrate(quantize_graph(graph, 'ORT_INT8'), batches, progress=False)
    before = channel_shift(graph, net, batches[0]).abs().max()
    BiasCorrection()(graph, batches)
    assert channel_shift(graph, net, batches[0]).abs().max() < 0.1 * before


def biased_gemm(alpha=1.0, beta=1.0, bias=None):
    """A Gemm ``alpha * x W + beta * C`` on 64 features whose weights all sit a third of a
    step above a grid point (the step is 1/127), as in :func:`biased_conv`."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    from razorlib.ir import from_onnx
    weight = np.full((64, 4), (1 + 1 / 3) / 127, np.float32)
    weight[0, :] = 1
    bias = np.zeros(4, np.float32) if bias is None else np.asarray(bias, np.float32)
    node = helper.make_node('Gemm', ['x', 'w', 'c'], ['y'], name='fc', alpha=alpha, beta=beta)
    onnx_graph = helper.make_graph(
        [node], 'gemm', [helper.make_tensor_value_info('x', TensorProto.FLOAT, ['n', 64])],
        [helper.make_tensor_value_info('y', TensorProto.FLOAT, None)],
        [numpy_helper.from_array(weight, 'w'), numpy_helper.from_array(bias, 'c')])
    model = helper.make_model(onnx_graph, opset_imports=[helper.make_opsetid('', 17)])
    model.ir_version = 8
    return from_onnx(model)


def mean_error(graph, images) -> float:
    with torch.no_grad():
        quantized = QuantExecutor(graph)(images)[0]
        with dequantized(graph):
            reference = QuantExecutor(graph)(images)[0]
    return float((quantized - reference).mean())


@pytest.mark.parametrize('platform', ['TRT_INT8', 'ORT_INT8'])
@pytest.mark.parametrize('alpha,beta', [(1.0, 1.0), (1.0, 2.0), (1.0, 0.5), (3.0, 0.5)])
def test_bias_correction_divides_a_gemm_shift_by_beta(platform, alpha, beta):
    torch.manual_seed(0)
    batches = [torch.rand(16, 64) for _ in range(4)]
    graph = calibrate(quantize_graph(biased_gemm(alpha, beta), platform), batches,
                      progress=False)
    before = mean_error(graph, batches[0])
    assert before == pytest.approx(-0.0826 * alpha, abs=0.002 * alpha)  # every weight rounds down
    assert BiasCorrection()(graph, batches).changes == 1
    # beta 2 used to overshoot to +0.08 (the shift applied twice), beta 0.5 to halve it
    assert abs(mean_error(graph, batches[0])) < 0.03 * abs(before)
    bias = graph.operations['fc'].inputs[2].value
    assert torch.allclose(bias * beta, torch.full((4, ), -before), rtol=0.05)


def test_bias_correction_skips_a_gemm_whose_bias_it_cannot_shift(caplog):
    torch.manual_seed(0)
    batches = [torch.rand(16, 64) for _ in range(2)]
    for beta, bias, reason in [(0.0, None, 'beta is 0'),
                               (1.0, [0.5], 'not one value per output channel')]:
        graph = calibrate(quantize_graph(biased_gemm(beta=beta, bias=bias), 'TRT_INT8'),
                          batches, progress=False)
        before = graph.operations['fc'].inputs[2].value.clone()
        with caplog.at_level(logging.INFO, logger='razorlib.quantization.passes'):
            assert BiasCorrection()(graph, batches).changes == 0
        assert "skipped Gemm 'fc'" in caplog.text and reason in caplog.text
        assert torch.equal(graph.operations['fc'].inputs[2].value, before)
        caplog.clear()


def test_bias_correction_weighs_batches_of_different_sizes_by_their_samples():
    """The shift is the mean error over every calibration sample: the same samples, in one
    batch or in a batch of 15 and a last batch of 1 (a dataloader without ``drop_last``),
    give the same correction.  Averaging the two batches' means would give the single,
    larger-input sample half the weight."""
    net = biased_conv()
    generator = torch.Generator().manual_seed(1)
    images = torch.cat([torch.rand(15, 4, 10, 10, generator=generator),
                        4 * torch.rand(1, 4, 10, 10, generator=generator)])
    corrected = []
    for batches in ([images], [images[:15], images[15:]]):
        graph = from_torch(net, images[:2], dynamic_batch=True)
        graph = calibrate(quantize_graph(graph, 'TRT_INT8'), [images], progress=False)
        BiasCorrection()(graph, batches)
        corrected.append(weight_layers(graph)[0].inputs[2].value)
    torch.testing.assert_close(corrected[1], corrected[0], rtol=0, atol=1e-5)
