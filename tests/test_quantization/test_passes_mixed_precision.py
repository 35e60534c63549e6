"""MixedPrecision: the fewest float layers that meet the target, on a case whose answer is
known; the other passes and configs drive it too."""
import pytest
import torch

from razorlib.ir import from_torch
from razorlib.quantization import (MixedPrecision, PTQSettings, QuantExecutor, calibrate,
                                   quantize_graph, quantize_torch_model, snr_db)
from razorlib.quantization.passes import keep_in_float, restore_quantized, weight_layers

SPOILED = (1, 3)  # the layers whose quantization destroys their output


def mlp() -> torch.nn.Module:
    """Five linear layers; in layers 1 and 3, input 0 is always 0 but its weight is 100,
    which sets every row's per-channel scale to 100/127: the real weights (about 0.25)
    all round to 0.  Any other layer quantizes well."""
    torch.manual_seed(0)
    layers = [torch.nn.Linear(16, 16) for _ in range(5)]
    with torch.no_grad():
        for index in SPOILED:
            layers[index - 1].weight[0], layers[index - 1].bias[0] = 0.0, 0.0
            layers[index].weight[:, 0] = 100.0
    return torch.nn.Sequential(*layers).eval()


def quantized(net, batches):
    graph = from_torch(net, batches[0], dynamic_batch=True)
    return calibrate(quantize_graph(graph, 'TRT_INT8'), batches, progress=False)


def test_the_spoiled_layers_and_only_they_stay_in_float():
    net = mlp()
    batches = [torch.randn(32, 16) for _ in range(2)]
    graph = quantized(net, batches)
    names = [op.name for op in weight_layers(graph)]
    with torch.no_grad():
        before = snr_db(net(batches[0]), QuantExecutor(graph)(batches[0])[0])
    assert before < 10
    result = MixedPrecision(target_snr_db=30)(graph, batches)
    chosen = graph.extension_attrib['mixed_precision']
    assert chosen['float_layers'] == [names[i] for i in SPOILED] and result.changes == 2
    assert chosen['reached'] >= 30
    held_out = torch.randn(64, 16)
    with torch.no_grad():
        assert snr_db(net(held_out), QuantExecutor(graph)(held_out)[0]) > 30


def test_a_float_layer_computes_with_its_fp32_weight_and_bias_again():
    """AdaRound's rounding and BiasCorrection's bias were chosen for the quantized layer;
    kept in float, the layer is the FP32 one: every layer floated, the graph is FP32."""
    net = mlp()
    batches = [torch.randn(32, 16) for _ in range(2)]
    graph = quantize_torch_model(net, batches, batches[0], calib_steps=2, progress=False,
                                 ptq_passes=[dict(type='AdaRound', steps=20), 'BiasCorrection'])
    layers = weight_layers(graph)
    before = {op.name: [var.value.clone() for var in op.inputs[1:]] for op in layers}
    assert any(not torch.equal(value, op.fp32_parameter(i + 1))
               for op in layers for i, value in enumerate(before[op.name]))
    saved = [keep_in_float(op) for op in layers]
    with torch.no_grad():
        torch.testing.assert_close(QuantExecutor(graph)(batches[0])[0], net(batches[0]))
    for entry in reversed(saved):
        restore_quantized(entry)
    for op in layers:
        assert all(torch.equal(var.value, value)
                   for var, value in zip(op.inputs[1:], before[op.name]))
        assert op.input_quant_config[1].state.is_activated


def test_one_float_layer_is_not_enough_and_a_met_target_floats_none():
    net = mlp()
    batches = [torch.randn(32, 16) for _ in range(2)]
    graph = quantized(net, batches)
    MixedPrecision(target_snr_db=30, max_layers=1)(graph, batches)  # warns, keeps the best
    assert len(graph.extension_attrib['mixed_precision']['float_layers']) == 1
    easy = quantized(torch.nn.Sequential(torch.nn.Linear(16, 4)), batches)
    assert MixedPrecision(target_snr_db=20)(easy, batches).changes == 0


def test_an_accuracy_target_through_a_metric():
    net = mlp()
    batches = [torch.randn(64, 16) for _ in range(2)]
    with torch.no_grad():
        labels = net(batches[0]).argmax(1)

    def top1(graph):
        return float((QuantExecutor(graph)(batches[0])[0].argmax(1) == labels).float().mean())

    graph = quantized(net, batches)
    assert top1(graph) < 0.9
    MixedPrecision(metric=top1, max_drop=0.02)(graph, batches)
    assert top1(graph) >= 0.98
    assert len(graph.extension_attrib['mixed_precision']['float_layers']) <= 2


def test_the_ptq_section_lists_the_passes():
    net = mlp()
    batches = [torch.randn(32, 16) for _ in range(2)]
    settings = PTQSettings.from_config(dict(ptq_passes=[
        'equalization', dict(type='AdaRound', steps=20), 'bias_correction',
        dict(type='MixedPrecision', target_snr_db=25)]))
    graph = quantize_torch_model(net, batches, batches[0], progress=False,
                                 **dict(settings.quantize_kwargs(), calib_steps=2))
    assert graph.extension_attrib['mixed_precision']['reached'] >= 25
    assert set(graph.extension_attrib['adaround']) <= {op.name for op in weight_layers(graph)}


def test_target_or_metric_not_both():
    with pytest.raises(ValueError, match='either target_snr_db or metric'):
        MixedPrecision()
