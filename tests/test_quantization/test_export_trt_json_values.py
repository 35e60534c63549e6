"""TRT_JSON writes what the quantized graph computes with: BiasCorrection's biases and
AdaRound's rounded weights (as the QDQ export does), and refuses MixedPrecision graphs."""
import json
import warnings

import numpy as np
import pytest
import torch
from onnx import numpy_helper

from razorlib.ir import from_torch
from razorlib.quantization import (AdaRound, BiasCorrection, MixedPrecision, QuantExecutor,
                                   calibrate, export_graph, fake_quantize, quantize_graph)
from razorlib.quantization.export import activation_ranges, float_layers, weights_off_trt_grid
from razorlib.quantization.passes import keep_in_float, restore_quantized
from ptq_helpers import batches, calibrated, float_graph

OFF_GRID = 'TensorRT computes weight scales itself'


def initializers(model):
    return {item.name: numpy_helper.to_array(item) for item in model.graph.initializer}


def qdq_values(model):
    """Each parameter of a QDQ model as the model computes with it: the dequantized
    integer initializers by their parameter's name, the float ones as they are."""
    values = initializers(model)
    out = {name: value for name, value in values.items() if value.dtype == np.float32}
    for node in model.graph.node:
        if node.op_type == 'DequantizeLinear' and node.input[0] in values:
            integers, scale, zero_point = (values[name] for name in node.input)
            axis = next((attr.i for attr in node.attribute if attr.name == 'axis'), 1)
            shape = [1] * integers.ndim
            if scale.ndim:
                shape[axis] = -1
            dequantized = ((integers.astype(np.float32) - zero_point.astype(np.float32)
                            .reshape(shape)) * scale.reshape(shape))
            out[node.input[0][:-len('_quantized')]] = dequantized
    return out


def export_both(graph, tmp_path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        plain = export_graph(graph, tmp_path / 'trt.onnx', 'TRT_JSON')
    qdq = export_graph(graph, tmp_path / 'qdq.onnx', 'QDQ_ONNX')
    return initializers(plain), qdq_values(qdq), [str(w.message) for w in caught]


@pytest.fixture(scope='module')
def passed_graph():
    data = batches(3)
    graph = calibrated(float_graph(), 'TRT_INT8', data=data)
    fp32 = {name: var.value.clone() for name, var in graph.variables.items()
            if var.is_parameter and var.value is not None}
    assert BiasCorrection()(graph, data).changes > 0
    assert AdaRound(steps=30, batch_size=2)(graph, data).changes > 0
    return graph, fp32


def test_trt_json_writes_the_pass_modified_values_the_qdq_export_has(passed_graph, tmp_path):
    graph, fp32 = passed_graph
    simulated = QuantExecutor(graph)(batches(1, seed=5)[0])[0]
    plain, qdq, messages = export_both(graph, tmp_path)
    assert not [m for m in messages if OFF_GRID in m]  # min-max weight scales: TRT's grid
    layers = {var.name for op in graph.operations.values() if op.type in ('Conv', 'Gemm')
              for var in op.inputs[1:]}
    assert layers <= set(plain) and layers <= set(qdq)
    changed = {'bias': 0, 'weight': 0}
    for name in layers:
        np.testing.assert_allclose(plain[name], qdq[name], rtol=1e-6, atol=0, err_msg=name)
        if not np.array_equal(plain[name], fp32[name].numpy()):
            changed[name.rsplit('.', 1)[-1]] += 1
    assert changed['bias'] > 0 and changed['weight'] > 0, changed  # not the FP32 values
    # the graph itself is left as it was
    assert torch.equal(QuantExecutor(graph)(batches(1, seed=5)[0])[0], simulated)


def test_trt_json_biases_are_the_corrected_floats(passed_graph, tmp_path):
    graph, fp32 = passed_graph
    plain, _, _ = export_both(graph, tmp_path)
    for op in graph.operations.values():
        if op.type in ('Conv', 'Gemm') and len(op.inputs) > 2:
            bias = op.inputs[2]
            assert np.array_equal(plain[bias.name], bias.value.detach().numpy()), bias.name
            assert not np.array_equal(plain[bias.name], fp32[bias.name].numpy()), bias.name


def test_trt_json_warns_when_tensorrt_would_round_the_weights_again(tmp_path):
    graph = calibrated(float_graph(), 'TRT_INT8')
    assert weights_off_trt_grid(graph) == []
    conv = next(op for op in graph.operations.values() if op.type == 'Conv')
    conv.input_quant_config[1].scale = conv.input_quant_config[1].scale * 1.5  # clips less
    assert weights_off_trt_grid(graph) == [conv.name]
    expected = rf'{OFF_GRID}.*1 layers \({conv.name}\).*only approximately kept'
    with pytest.warns(UserWarning, match=expected):
        export_graph(graph, tmp_path / 'net.onnx', 'TRT_JSON')


def mixed_precision_graph():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16),
                              torch.nn.ReLU(), torch.nn.Linear(16, 4)).eval()
    with torch.no_grad():
        net[0].weight[0], net[0].bias[0] = 0.0, 0.0
        net[2].weight[:, 0] = 100.0
    data = [torch.randn(32, 16) for _ in range(2)]
    graph = calibrate(quantize_graph(from_torch(net, data[0]), 'TRT_INT8'), data,
                      progress=False)
    MixedPrecision(target_snr_db=30)(graph, data)
    return graph


def test_trt_json_refuses_a_mixed_precision_graph_naming_its_float_layers(tmp_path):
    graph = mixed_precision_graph()
    kept = float_layers(graph)
    assert kept
    with pytest.raises(ValueError, match=rf'floating point \({kept[0]}\b.*'
                                         'export QDQ_ONNX instead'):
        export_graph(graph, tmp_path / 'mp.onnx', 'TRT_JSON')
    assert not (tmp_path / 'mp.json').exists() and not (tmp_path / 'mp.onnx').exists()
    model = export_graph(graph, tmp_path / 'mp.onnx', 'QDQ_ONNX')  # the way to deploy it
    assert {'QuantizeLinear', 'DequantizeLinear'} <= {node.op_type for node in model.graph.node}


def test_trt_json_without_float_layers_is_unaffected(tmp_path):
    graph = calibrated(float_graph(), 'TRT_INT8')
    graph.extension_attrib['mixed_precision'] = dict(float_layers=[], reached=40.0)
    export_graph(graph, tmp_path / 'net.onnx', 'TRT_JSON')
    assert json.loads((tmp_path / 'net.json').read_text())['act_quant_info']


def test_activation_ranges_refuse_a_mixed_precision_graph_naming_its_float_layers():
    graph = mixed_precision_graph()
    kept = float_layers(graph)
    with pytest.raises(ValueError, match=rf'^activation_ranges: graph .* keeps layers in '
                                         rf'floating point \({kept[0]}\b.*'
                                         'export QDQ_ONNX instead$'):
        activation_ranges(graph)
    graph.extension_attrib['mixed_precision']['float_layers'] = []
    assert float_layers(graph) == kept  # the layers' states say so without the record


def test_a_layer_kept_in_float_by_hand_is_refused_until_restored():
    graph = calibrated(float_graph(), 'TRT_INT8')
    assert float_layers(graph) == [] and activation_ranges(graph)
    layer = next(op for op in graph.topological_sort() if op.type in ('Conv', 'Gemm'))
    saved = keep_in_float(layer)
    assert float_layers(graph) == [layer.name]
    with pytest.raises(ValueError, match=rf'floating point \({layer.name}\)'):
        activation_ranges(graph)
    restore_quantized(saved)
    assert float_layers(graph) == [] and activation_ranges(graph)


class _ReusedLinear(torch.nn.Module):
    """One Linear run twice; its second run comes after a Sigmoid, which TRT_INT8's
    conservative dispatch leaves in FP32, and so does that second run."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.linear(torch.sigmoid(self.linear(x)))


def test_a_layer_reused_in_float_gets_its_own_float_weight(tmp_path):
    # the plain model held the weight on the INT8 layer's grid, which the FP32 layer then
    # computed with (the executor's FP32 layer uses the float weight), so the export was
    # refused; quantize_graph now gives each reader of the shared parameter its own copy
    torch.manual_seed(0)
    net, x = _ReusedLinear().eval(), torch.randn(2, 4)
    graph = quantize_graph(from_torch(net, x), 'TRT_INT8')
    assert {name: op.platform.name for name, op in graph.operations.items()} == {
        'node_linear': 'TRT_INT8', 'node_sigmoid': 'FP32', 'node_linear_1': 'FP32'}
    calibrate(graph, [torch.randn(2, 4) for _ in range(3)], progress=False)
    model = export_graph(graph, tmp_path / 'net.onnx', 'TRT_JSON')
    initializers = {init.name: torch.from_numpy(numpy_helper.to_array(init).copy())
                    for init in model.graph.initializer}
    weights = {node.name: initializers[node.input[1]] for node in model.graph.node
               if node.op_type == 'Gemm'}
    int8_layer = graph.operations['node_linear']
    assert torch.equal(weights['node_linear'],
                       fake_quantize(net.linear.weight.detach(), int8_layer.input_quant_config[1]))
    assert torch.equal(weights['node_linear_1'], net.linear.weight.detach())
