"""BiasCorrection: a quantization error with a mean shift per channel loses the shift."""
import torch

from razorlib.ir import from_torch
from razorlib.quantization import (BiasCorrection, QuantExecutor, calibrate, dequantized,
                                   quantize_graph)


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
