"""export_graph: QDQ ONNX structure, onnxruntime agreement, TensorRT JSON, no mutation,
the format a platform's name stands for."""
import json
import os

import onnx
import pytest
import torch
from onnx import numpy_helper

from razorlib.ir import Opset, from_onnx, structural_differences
from razorlib.quantization import (QuantExecutor, TargetPlatform, activation_ranges,
                                   bake_parameters, export_graph, export_onnx,
                                   quantable_operations)
from ptq_helpers import (ORT_OPTIMIZED_INEXACT, STEPS, batches, calibrated, float_graph,
                         run_onnxruntime, worst_steps)


def nodes_by_output(model):
    return {name: node for node in model.graph.node for name in node.output}


def initializers(model):
    return {item.name: numpy_helper.to_array(item) for item in model.graph.initializer}


@pytest.fixture(scope='module', params=['TRT_INT8', 'ORT_INT8'])
def exported(request, tmp_path_factory):
    graph = calibrated(float_graph(), request.param)
    path = tmp_path_factory.mktemp('export') / 'net.onnx'
    return graph, export_graph(graph, path), path


def test_checker_passes_and_the_file_is_the_model(exported):
    _, model, path = exported
    onnx.checker.check_model(model, full_check=True)
    assert onnx.load(str(path)) == model
    assert model.opset_import[0].version >= 13


def test_weights_are_integer_initializers_dequantized_per_channel(exported):
    graph, model, _ = exported
    producers, values = nodes_by_output(model), initializers(model)
    for op in quantable_operations(graph):
        if op.type not in ('Conv', 'Gemm'):
            continue
        node = next(node for node in model.graph.node if node.name == op.name)
        dequantize = producers[node.input[1]]
        assert dequantize.op_type == 'DequantizeLinear'
        assert onnx.helper.get_attribute_value(dequantize.attribute[0]) == 0  # axis
        weight, scale, zero_point = (values[name] for name in dequantize.input)
        assert weight.dtype.name == 'int8' and weight.min() >= -127
        assert zero_point.dtype.name == 'int8' and not zero_point.any()
        assert scale.shape == (weight.shape[0], )


def test_activations_and_biases_follow_the_platform(exported):
    graph, model, _ = exported
    platform = quantable_operations(graph)[0].platform.name
    producers, values = nodes_by_output(model), initializers(model)
    zero_points = {values[node.input[2]].dtype.name for node in model.graph.node
                   if node.op_type == 'QuantizeLinear'}
    assert zero_points == ({'int8'} if platform == 'TRT_INT8' else {'uint8'})
    conv = next(op for op in quantable_operations(graph) if op.type == 'Conv')
    node = next(node for node in model.graph.node if node.name == conv.name)
    if platform == 'TRT_INT8':  # biases stay FP32 initializers
        assert node.input[2] in values and values[node.input[2]].dtype.name == 'float32'
        return
    dequantize = producers[node.input[2]]
    bias, scale, zero_point = (values[name] for name in dequantize.input)
    assert bias.dtype.name == 'int32' and zero_point.dtype.name == 'int32'
    expected = conv.input_quant_config[0].scale * conv.input_quant_config[1].scale
    assert torch.equal(torch.tensor(scale), expected)


@pytest.mark.parametrize('optimized', [False, True])
def test_onnxruntime_agrees_with_the_executor(exported, optimized):
    if optimized and ORT_OPTIMIZED_INEXACT:
        pytest.skip(ORT_OPTIMIZED_INEXACT)
    graph, model, _ = exported
    for x in batches(3, seed=11):
        ours = QuantExecutor(graph)(x)
        theirs = run_onnxruntime(model, [x], optimized)
        assert worst_steps(graph, ours, theirs) <= STEPS


@pytest.mark.parametrize('platform', ['TRT_INT8', 'ORT_INT8'])
def test_export_does_not_change_the_graph(platform, tmp_path):
    graph = calibrated(float_graph(), platform)
    bake_parameters(graph)
    before = graph.copy(copy_value=True)
    values = {name: var.value for name, var in graph.variables.items()}
    configs = [(config.state, config.scale) for op in quantable_operations(graph)
               for config, _ in op.config_with_variable]
    for target in ('QDQ_ONNX', 'TRT_JSON', 'ONNX'):
        if target == 'TRT_JSON' and platform == 'ORT_INT8':
            continue
        export_graph(graph, tmp_path / f'{target}.onnx', target)
    assert structural_differences(graph, before) == []
    assert all(graph.variables[name].value is value for name, value in values.items())
    assert configs == [(config.state, config.scale) for op in quantable_operations(graph)
                       for config, _ in op.config_with_variable]
    assert not any(op.is_dequantized for op in quantable_operations(graph))


def test_trt_json_holds_the_ranges_beside_a_plain_model(tmp_path):
    graph = calibrated(float_graph(), 'TRT_INT8')
    bake_parameters(graph)
    in_use = {name: var.value.clone() for name, var in graph.variables.items()
              if var.is_parameter}
    model = export_graph(graph, tmp_path / 'net.onnx', 'TRT_JSON')
    ranges = json.loads((tmp_path / 'net.json').read_text())['act_quant_info']
    assert ranges == pytest.approx(activation_ranges(graph))
    assert not {'QuantizeLinear', 'DequantizeLinear'} & {node.op_type for node in model.graph.node}
    for op in quantable_operations(graph):
        for var, config in zip(op.outputs, op.output_quant_config):
            if config.state.is_activated:
                assert ranges[var.name] == pytest.approx(float(config.scale) * 127)
    assert set(ranges) >= set(graph.inputs)
    # the values the quantized graph computes with (baked weights, float biases): TensorRT
    # quantizes them again to the same integers (test_export_trt_json_values.py)
    for name, value in initializers(model).items():
        assert torch.equal(torch.tensor(value), in_use[name])


def test_plain_onnx_round_trips_to_the_float_graph():
    graph = calibrated(float_graph(), 'ORT_INT8')
    assert structural_differences(from_onnx(export_onnx(graph)), float_graph()) == []


def test_a_quantized_graph_output_keeps_its_name():
    graph = calibrated(float_graph(), 'ORT_INT8')
    name, = graph.outputs
    assert graph.variables[name].source_op.output_quant_config[0].state.is_activated
    model = export_graph(graph, None)
    assert [item.name for item in model.graph.output] == [name]
    assert nodes_by_output(model)[name].op_type == 'DequantizeLinear'


def test_errors(tmp_path):
    graph = calibrated(float_graph(), 'ORT_INT8')
    with pytest.raises(KeyError, match="'FP32' is no export format .*registered export formats"):
        export_graph(graph, tmp_path / 'x.onnx', 'FP32')
    with pytest.raises(ValueError, match='TensorRT dynamic ranges are per-tensor and symmetric'):
        export_graph(graph, tmp_path / 'x.onnx', 'TRT_JSON')
    for op in graph.operations.values():
        op.opset = Opset(11)
    with pytest.raises(ValueError, match='needs opset 13 or later'):
        export_graph(graph, tmp_path / 'x.onnx')


def op_types(model):
    return [node.op_type for node in model.graph.node]


def test_a_platform_names_its_format_and_none_names_the_graphs(tmp_path):
    graph = calibrated(float_graph(), 'TRT_INT8')
    qdq = op_types(export_graph(graph, tmp_path / 'qdq.onnx', 'QDQ_ONNX'))
    assert 'QuantizeLinear' in qdq
    assert op_types(export_graph(graph, tmp_path / 'trt.onnx', 'TRT_INT8')) == qdq
    assert op_types(export_graph(graph, tmp_path / 'default.onnx')) == qdq
    assert op_types(export_graph(graph, tmp_path / 'dict.onnx', dict(type='QDQ_ONNX'))) == qdq
    plain = op_types(export_graph(float_graph(), tmp_path / 'plain.onnx'))  # not quantized
    assert 'QuantizeLinear' not in plain and plain == op_types(export_onnx(graph))
    ort = calibrated(float_graph(), 'ORT_INT8')
    assert op_types(export_graph(ort, tmp_path / 'ort.onnx')) == op_types(
        export_graph(ort, tmp_path / 'ort_qdq.onnx', 'ORT_INT8'))


def test_trt_json_never_writes_both_files_to_one_path(tmp_path):
    graph = calibrated(float_graph(), 'TRT_INT8')
    model = export_graph(graph, tmp_path / 'ranges.json', platform='TRT_JSON')
    assert sorted(os.listdir(tmp_path)) == ['ranges.json', 'ranges.onnx']
    assert onnx.load(tmp_path / 'ranges.onnx').graph == model.graph
    ranges = json.loads((tmp_path / 'ranges.json').read_text())['act_quant_info']
    assert ranges == pytest.approx(activation_ranges(graph))
    export_graph(graph, tmp_path / 'bare', dict(type='TRT_JSON'))
    assert {'bare.onnx', 'bare.json'} <= set(os.listdir(tmp_path))


def test_a_platform_other_than_the_graphs_is_refused(tmp_path):
    # export_graph(ort_graph, path, 'TRT_INT8') used to write the ORT graph's uint8
    # asymmetric Q/DQ pairs, which TensorRT does not run, as the TRT_INT8 model, silently.
    ort = calibrated(float_graph(), 'ORT_INT8')
    with pytest.raises(ValueError) as error:
        export_graph(ort, tmp_path / 'trt.onnx', 'TRT_INT8')
    assert str(error.value) == (
        "export_graph: platform TRT_INT8 was named, but graph 'main_graph' is quantized for "
        'ORT_INT8; quantize it for TRT_INT8, or name the export format (QDQ_ONNX) to write it')
    with pytest.raises(ValueError, match="graph 'main_graph' is quantized for TRT_INT8"):
        export_graph(calibrated(float_graph(), 'TRT_INT8'), tmp_path / 'ort.onnx', 'ort_int8')
    with pytest.raises(ValueError, match="but graph 'main_graph' is not quantized; quantize it "
                       'for TRT_INT8, or export it as plain ONNX$'):  # QDQ_ONNX refuses it too
        export_graph(float_graph(), tmp_path / 'float.onnx', TargetPlatform.TRT_INT8)
    with pytest.raises(KeyError, match="'FP32' is no export format .* and no quantized plat"):
        export_graph(ort, tmp_path / 'fp32.onnx', TargetPlatform.FP32)  # no format of its own
    assert not os.listdir(tmp_path)
    model = export_graph(ort, tmp_path / 'ort.onnx', 'QDQ_ONNX')  # the format writes it
    assert 'QuantizeLinear' in op_types(model)
