"""What the QDQ and TensorRT exports cannot write as razorlib computes it, they refuse,
naming the operation: operations left dequantized, activations rounded otherwise than half
to even, a weight layer the dispatcher left in FP32 between two dynamic ranges, a graph
with no quantized operation."""
import os

import pytest
import torch

from razorlib.ir import RoundingPolicy
from razorlib.quantization import (QuantExecutor, activation_ranges, dequantize_graph,
                                   export_graph, quantable_operations, quantize_torch_model,
                                   restore_quantize_state)
from razorlib.quantization.passes import keep_in_float
from ptq_helpers import STEPS, calibrated, float_graph, output_step, run_onnxruntime


def net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(),
                               torch.nn.Conv2d(8, 8, 3), torch.nn.Hardswish(),
                               torch.nn.Flatten(), torch.nn.Linear(8 * 4 * 4, 10)).eval()


def quantized(platform='TRT_INT8', **options):
    generator = torch.Generator().manual_seed(0)
    batches = [torch.randn(8, 3, 8, 8, generator=generator) for _ in range(2)]
    return quantize_torch_model(net(), batches, batches[0], platform, dispatcher='allin',
                                progress=False, **options)


@pytest.mark.parametrize('export_format', ['QDQ_ONNX', 'TRT_JSON'])
def test_an_operation_left_dequantized_is_refused_naming_it(export_format, tmp_path):
    graph = quantized()
    graph.operations['node_conv2d_1'].dequantize()
    # the QDQ model had no Q/DQ around it, and a graph dequantized whole none at all
    with pytest.raises(ValueError, match=r"^export_\w+: graph .* has 1 operation\(s\) left "
                                         r"dequantized \('node_conv2d_1'\).*"
                                         "restore_quantize_state.*keep_in_float"):
        export_graph(graph, tmp_path / 'net.onnx', export_format)
    with pytest.raises(ValueError, match='6 operation\\(s\\) left dequantized'):
        export_graph(dequantize_graph(graph), tmp_path / 'net.onnx', export_format)
    export_graph(graph, tmp_path / 'fp32.onnx', 'ONNX')  # the FP32 model: nothing to refuse
    export_graph(restore_quantize_state(graph), tmp_path / 'net.onnx', export_format)


def test_activation_ranges_refuse_an_operation_left_dequantized():
    graph = quantized()
    graph.operations['node_relu'].dequantize()
    with pytest.raises(ValueError, match=r"^activation_ranges: .* \('node_relu'\)"):
        activation_ranges(graph)


def round_down(graph, parameters_only=False):
    """``graph`` with its configs (or its parameters' alone) rounding down."""
    for op in quantable_operations(graph):
        for config, var in op.config_with_variable:
            if var.is_parameter or not parameters_only:
                config.rounding = RoundingPolicy.ROUND_DOWN
    return graph


@pytest.mark.parametrize('export_format, runtime', [('QDQ_ONNX', 'QuantizeLinear'),
                                                    ('TRT_JSON', 'TensorRT')])
def test_an_activation_not_rounded_half_to_even_is_refused(export_format, runtime, tmp_path):
    graph = round_down(quantized())
    # onnxruntime computed 4 output steps off the executor, without a warning
    with pytest.raises(ValueError, match=rf"^operation 'node_conv2d': an activation quantized "
                                         rf"with rounding ROUND_DOWN; {runtime} rounds half to "
                                         "even"):
        export_graph(graph, tmp_path / 'net.onnx', export_format)


def test_weights_rounded_otherwise_are_written_as_their_integers(tmp_path):
    graph = round_down(quantized('ORT_INT8'), parameters_only=True)
    model = export_graph(graph, tmp_path / 'net.onnx', 'QDQ_ONNX')
    x = torch.randn(4, 3, 8, 8, generator=torch.Generator().manual_seed(9))
    expected = QuantExecutor(graph)(x)[0]
    got = run_onnxruntime(model, [x], optimized=False)[0]
    step = output_step(graph, next(iter(graph.outputs)), expected)
    assert float((got - expected).abs().max()) <= STEPS * step


def test_a_layer_the_dispatcher_left_fp32_between_ranges_is_refused(tmp_path):
    graph = quantized(dispatching_table={'node_conv2d_1': 'FP32'})
    # its input and output have ranges, so TensorRT would run it in INT8
    with pytest.raises(ValueError, match=r"^export_trt_json: .* keeps layers in floating "
                                         r"point \(node_conv2d_1\).*export QDQ_ONNX instead"):
        export_graph(graph, tmp_path / 'net.json', 'TRT_JSON')
    with pytest.raises(ValueError, match=r'floating point \(node_conv2d_1\)'):
        activation_ranges(graph)
    export_graph(graph, tmp_path / 'net.onnx', 'QDQ_ONNX')  # its Q/DQ pairs say it


def test_a_layer_the_dispatcher_left_fp32_at_the_input_is_accepted(tmp_path):
    graph = quantized(dispatching_table={'node_conv2d': 'FP32'})
    ranges = activation_ranges(graph)  # its input has no range: TensorRT runs it in FP32
    layer = graph.operations['node_conv2d']
    assert layer.inputs[0].name not in ranges and layer.outputs[0].name in ranges
    export_graph(graph, tmp_path / 'net.json', 'TRT_JSON')


@pytest.mark.parametrize('export_format', ['QDQ_ONNX', 'TRT_JSON'])
def test_a_graph_with_no_quantized_operation_is_refused(export_format, tmp_path):
    # A graph nothing of which was quantized (a transformer under the conservative
    # dispatcher: quantize_graph warns) used to be written as the FP32 model, no Q/DQ pair
    # and no range, under the INT8 format asked for.
    graph = float_graph()
    with pytest.raises(ValueError) as error:
        export_graph(graph, tmp_path / 'net.onnx', export_format)
    action = {'QDQ_ONNX': 'export_qdq_onnx', 'TRT_JSON': 'export_trt_json'}[export_format]
    assert str(error.value) == (
        f"{action}: graph 'main_graph' has no quantized operation, so its model would compute "
        'all in floating point; quantize it first (quantize_graph warns when nothing ends on '
        'its platform), or export it as plain ONNX')
    assert not os.listdir(tmp_path)


@pytest.mark.parametrize('export_format', ['QDQ_ONNX', 'TRT_JSON'])
def test_a_graph_whose_every_layer_is_kept_in_float_is_refused(export_format, tmp_path):
    # keep_in_float on every layer leaves quantable operations with FP32 configs only: the
    # export wrote the FP32 model as the INT8 one
    graph = calibrated(float_graph())
    for op in quantable_operations(graph):
        keep_in_float(op)
    with pytest.raises(ValueError, match="graph 'main_graph' has no quantized operation"):
        export_graph(graph, tmp_path / 'net.onnx', export_format)
    assert not os.listdir(tmp_path)
