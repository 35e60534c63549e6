"""LayerwiseEqualization: FP32-exact, and a clear SNR gain on layers with mismatched ranges."""
import pytest
import torch

from razorlib.ir import TorchExecutor, from_torch
from razorlib.quantization import (LayerwiseEqualization, PTQSettings, QuantExecutor,
                                   quantize_torch_model, snr_db)
from razorlib.quantization.passes import equalizable_pairs

SPREAD = torch.linspace(-1.5, 1.5, 16)  # channel i of the first conv scaled by 10**SPREAD[i]


def mismatched(groups: int = 1, act=torch.nn.ReLU, factor: torch.Tensor = 10 ** SPREAD
               ) -> torch.nn.Module:
    """conv -> act -> conv (depthwise when ``groups`` > 1) -> ReLU -> 1x1 conv whose first
    conv's output channel ``i`` is scaled by ``factor[i]`` (by default over three
    decades), undone by the second conv's inputs: the same function as without the
    scaling (through a ReLU), but a per-tensor activation quantizer crushes the small
    channels."""
    torch.manual_seed(0)
    middle = 16 if groups > 1 else 8
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), act(),
                              torch.nn.Conv2d(16, middle, 3, padding=1, groups=groups),
                              torch.nn.ReLU(), torch.nn.Conv2d(middle, 8, 1)).eval()
    with torch.no_grad():
        net[0].weight.mul_(factor[:, None, None, None])
        net[0].bias.mul_(factor)
        shape = (-1, 1, 1, 1) if groups > 1 else (1, -1, 1, 1)
        net[2].weight.div_(factor.reshape(shape))
    return net


@pytest.mark.parametrize('groups', [1, 16], ids=['dense', 'depthwise'])
def test_equalization_keeps_fp32_and_gains_at_least_20_db(groups):
    net = mismatched(groups)
    batches = [torch.randn(8, 3, 8, 8) for _ in range(4)]
    held_out = torch.randn(32, 3, 8, 8)
    with torch.no_grad():
        reference = net(held_out)
    snr = {}
    for passes in ([], ['equalization']):
        graph = quantize_torch_model(net, batches, batches[0], calib_steps=4, progress=False,
                                     observer='minmax', ptq_passes=passes)
        snr[bool(passes)] = snr_db(reference, QuantExecutor(graph)(held_out)[0])
    # measured: 11.6 -> 40.9 dB (dense), 10.6 -> 37.0 dB (depthwise)
    assert snr[True] > snr[False] + 20, snr


def test_equalization_is_exact_in_fp32_and_balances_ranges():
    net = mismatched()
    x = torch.randn(4, 3, 8, 8)
    graph = from_torch(net, x)
    before = TorchExecutor(graph)(x)[0]
    result = LayerwiseEqualization()(graph, [])
    assert result.changes == 2  # conv -> relu -> conv, twice
    assert torch.allclose(TorchExecutor(graph)(x)[0], before, rtol=1e-4, atol=1e-5)
    first = [op for op in graph.operations.values() if op.type == 'Conv'][0]
    ranges = first.inputs[1].value.abs().amax(dim=(1, 2, 3))
    assert ranges.max() / ranges.min() < 30  # was 10**3 times the weights' own spread


def test_clip_between_layers_is_not_equalized():
    graph = from_torch(mismatched(act=torch.nn.ReLU6), torch.randn(1, 3, 8, 8))
    pairs = [(a.name, b.name) for a, b in equalizable_pairs(graph)]
    assert len(pairs) == 1  # only the second conv -> ReLU -> third conv


def test_equalization_must_come_before_calibrated_passes():
    with pytest.raises(ValueError, match='LayerwiseEqualization runs on the FP32 graph'):
        PTQSettings.from_config(dict(ptq_passes=['bias_correction', 'equalization']))


def test_a_float_pass_refuses_a_quantized_graph():
    net = mismatched()
    batches = [torch.randn(2, 3, 8, 8)]
    graph = quantize_torch_model(net, batches, batches[0], calib_steps=1, progress=False)
    with pytest.raises(ValueError, match='runs on the FP32 graph before quantization'):
        LayerwiseEqualization()(graph, batches)
