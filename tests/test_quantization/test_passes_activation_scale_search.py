"""ActivationScaleSearch: activation scales chosen for the graph's output error."""
import pytest
import torch
from torch import nn

from razorlib.quantization import (ActivationScaleSearch, QuantExecutor, export_graph,
                                   quantize_torch_model, snr_db)
from razorlib.quantization.passes import activation_roots

from ptq_helpers import STEPS, run_onnxruntime, worst_steps


class OutlierBlock(nn.Module):
    """A residual block whose first activation has one outlier channel the output ignores.

    Channel 0 of ``conv1`` is 50 times larger than the others, and ``conv2`` reads it with
    weights near zero: the tensor's own MSE scale must cover the outlier, which leaves the
    channels that matter a coarse grid; clipping channel 0 costs the output nothing.
    """

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(8, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.head = nn.Linear(8, 4)
        with torch.no_grad():
            self.conv1.weight[0] *= 50
            self.conv1.bias[0] = 20.0
            self.conv2.weight[:, 0] *= 1e-3

    def forward(self, x):
        y = self.conv2(torch.relu(self.conv1(x)))
        return self.head(torch.relu(y + x).mean((2, 3)))


def data(count, seed):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(16, 8, 8, 8, generator=generator) for _ in range(count)]


def quantized_block(platform='TRT_INT8'):
    torch.manual_seed(0)
    net = OutlierBlock().eval()
    batches = data(4, seed=1)
    return net, quantize_torch_model(net, batches, batches[0], platform, calib_steps=4,
                                     observer='mse', progress=False), batches


def output_snr(net, graph, batches):
    with torch.no_grad():
        reference = torch.cat([net(batch) for batch in batches])
        quantized = torch.cat([QuantExecutor(graph)(batch)[0] for batch in batches])
    return snr_db(reference, quantized)


def test_the_search_raises_the_output_snr_on_held_out_data():
    net, graph, batches = quantized_block()
    held_out = data(2, seed=2)
    before = output_snr(net, graph, held_out)
    result = ActivationScaleSearch(spans=(4.0, 2.0, 1.19))(graph, batches)
    after = output_snr(net, graph, held_out)
    assert after > before + 6, (before, after)
    record = graph.extension_attrib['activation_scale_search']
    assert record['after'] < record['before'] / 4
    # the outlier tensor (conv1's fused ReLU, the first one) gets a much finer scale: the
    # channel that the output ignores is clipped
    relus = [key for key in record['factors'] if graph.operations[key.split(':')[0]].type == 'Relu']
    assert record['factors'][relus[0]] < 0.25, record['factors']
    assert all(0.5 < record['factors'][key] < 2 for key in record['factors'] if key != relus[0])
    assert result.changes == sum(factor != 1.0 for factor in record['factors'].values())


def test_int32_biases_follow_the_searched_input_scales():
    _, graph, batches = quantized_block('ORT_INT8')  # biases quantized (TRT's stay float)
    ActivationScaleSearch(spans=(2.0, ))(graph, batches)
    layers = [op for op in graph.operations.values() if op.type == 'Conv']
    assert len(layers) == 2
    for op in layers:
        data_config, weight, bias = op.input_quant_config
        assert bias.state.is_passive
        assert torch.allclose(bias.scale, data_config.scale * weight.scale)
    assert any(factor != 1.0 for factor in
               graph.extension_attrib['activation_scale_search']['factors'].values())


def test_the_search_never_raises_the_calibration_error():
    _, graph, batches = quantized_block()
    for key in activation_roots(graph):
        ActivationScaleSearch(spans=(1.5, ), points=3, scales=[key])(graph, batches)
        record = graph.extension_attrib['activation_scale_search']
        assert record['after'] <= record['before']


def test_searched_graph_exports_qdq_onnx_that_onnxruntime_runs_as_simulated(tmp_path):
    _, graph, batches = quantized_block()
    ActivationScaleSearch(spans=(4.0, 2.0))(graph, batches)
    model = export_graph(graph, tmp_path / 'block.onnx', 'QDQ_ONNX')
    assert any(node.op_type == 'QuantizeLinear' for node in model.graph.node)
    theirs = run_onnxruntime(model, [batches[1]])
    with torch.no_grad():
        ours = QuantExecutor(graph)(batches[1])
    assert worst_steps(graph, ours, theirs) <= STEPS


def test_options_and_unknown_scales_are_refused_with_names():
    _, graph, batches = quantized_block()
    with pytest.raises(ValueError, match='spans'):
        ActivationScaleSearch(spans=(1.0, ))
    with pytest.raises(ValueError, match='points'):
        ActivationScaleSearch(points=4)
    with pytest.raises(KeyError, match='no activation scale .*nowhere:out0'):
        ActivationScaleSearch(scales=['nowhere:out0'])(graph, batches)
    with pytest.raises(ValueError, match='needs calibration batches'):
        ActivationScaleSearch()(graph, [])
