"""ClipEqualization: exact on the calibrated ranges, and a clear SNR gain where channels
stay far below a ReLU6."""
import pytest
import torch
from test_passes_equalization import mismatched

from razorlib.ir import TorchExecutor, from_torch
from razorlib.quantization import ClipEqualization, QuantExecutor, quantize_torch_model, snr_db
from razorlib.quantization.passes import clipped_pairs

GAINS = torch.logspace(-2, 0, 16)  # channel i of the first conv scaled by GAINS[i]


def quiet_channels(groups: int = 16, act=torch.nn.ReLU6) -> torch.nn.Module:
    """conv -> act -> conv (depthwise by default) -> ReLU -> 1x1 conv, whose first conv's
    channels are scaled down by up to 100 (undone by the second conv): most of them stay
    far below the ReLU6's 6, which one per-tensor quantizer sizes by the loud ones."""
    return mismatched(groups, act, GAINS)


def batches(count: int = 4):
    torch.manual_seed(1)
    return [torch.randn(8, 3, 8, 8) for _ in range(count)]


def test_finds_the_pairs_joined_by_a_clip_from_zero():
    x = torch.randn(1, 3, 8, 8)
    graph = from_torch(quiet_channels(), x)
    convs = [op.name for op in graph.topological_sort() if op.type == 'Conv']
    assert [(a.name, b.name, high) for a, b, high in clipped_pairs(graph)] == [
        (convs[0], convs[1], 6.0)]
    assert clipped_pairs(from_torch(quiet_channels(act=torch.nn.ReLU), x)) == []
    assert clipped_pairs(from_torch(quiet_channels(act=torch.nn.Hardtanh), x)) == []  # [-1, 1]


def test_is_exact_on_the_calibrated_ranges_and_amplifies_only_quiet_channels():
    data = batches()
    graph = from_torch(quiet_channels(), data[0])
    first = [op for op in graph.topological_sort() if op.type == 'Conv'][0]
    before_weight = first.inputs[1].value.clone()
    executor = TorchExecutor(graph)
    peaks = torch.stack([executor(b, output_names=[first.outputs[0].name])[0]
                         .amax(dim=(0, 2, 3)) for b in data]).amax(0)
    before = [executor(b)[0] for b in data]
    assert ClipEqualization(margin=0.9, max_factor=1000)(graph, data).changes == 1
    for batch, expected in zip(data, before):
        torch.testing.assert_close(TorchExecutor(graph)(batch)[0], expected,
                                   rtol=1e-4, atol=1e-5)
    scale = first.inputs[1].value.abs().amax(dim=(1, 2, 3)) / before_weight.abs().amax(
        dim=(1, 2, 3))
    expected = (0.9 * 6 / peaks).clamp(min=1.0)
    torch.testing.assert_close(scale, expected, rtol=1e-4, atol=0)
    assert bool((scale[peaks >= 5.4] == 1).all()) and bool((scale[peaks < 5.4] > 1).all())


@pytest.mark.parametrize('groups', [16, 1], ids=['depthwise', 'dense'])
def test_gains_at_least_10_db_on_quiet_channels(groups):
    net, data = quiet_channels(groups), batches()
    held_out = torch.randn(64, 3, 8, 8)
    with torch.no_grad():
        reference = net(held_out)
    snr = {}
    for passes in ([], [dict(type='ClipEqualization', max_factor=1000)]):
        graph = quantize_torch_model(net, data, data[0], calib_steps=4, progress=False,
                                     observer='minmax', ptq_passes=passes)
        snr[bool(passes)] = snr_db(reference, QuantExecutor(graph)(held_out)[0])
    # measured: 15.2 -> 34.3 dB (depthwise), 17.0 -> 38.7 dB (dense)
    assert snr[True] > snr[False] + 10, snr


def test_depthwise_only_leaves_dense_pairs_alone():
    data = batches(1)
    graph = from_torch(quiet_channels(groups=1), data[0])
    assert ClipEqualization(depthwise_only=True)(graph, data).changes == 0
    assert ClipEqualization(depthwise_only=False)(graph, data).changes == 1


def test_dead_channels_and_loud_ones_are_left_alone():
    net = quiet_channels()
    with torch.no_grad():
        net[0].bias[0] = -100.0  # channel 0 never fires
        net[0].weight[15] *= 20  # channel 15 reaches the clip
    data = batches(2)
    graph = from_torch(net, data[0])
    first = [op for op in graph.topological_sort() if op.type == 'Conv'][0]
    before = first.inputs[1].value.clone()
    ClipEqualization(max_factor=1000)(graph, data)
    torch.testing.assert_close(first.inputs[1].value[0], before[0])
    torch.testing.assert_close(first.inputs[1].value[15], before[15])  # reaches the clip


@pytest.mark.parametrize('options, got', [
    (dict(margin=0.0), '0.0 and 16.0'), (dict(margin=1.5), '1.5 and 16.0'),
    (dict(max_factor=0.5), '0.9 and 0.5'),
])
def test_bad_options_are_refused(options, got):
    with pytest.raises(ValueError, match=r'ClipEqualization: margin must be in \(0, 1\] and '
                       f'max_factor >= 1, got {got}'):
        ClipEqualization(**options)


def test_needs_calibration_batches():
    graph = from_torch(quiet_channels(), torch.randn(1, 3, 8, 8))
    with pytest.raises(ValueError, match='ClipEqualization reads calibration batches'):
        ClipEqualization()(graph, [])
