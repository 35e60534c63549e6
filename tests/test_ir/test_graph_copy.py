"""Graph copies: shallow shares tensors, deep clones them, configs are always cloned."""
import pytest
import torch

from razorlib.ir import QuantizationStates, TensorQuantizationConfig
from ir_helpers import conv_relu_graph, fake_quantize, make_quantable, same_bits, structure


def quantized_graph():
    """conv and relu quantable; relu's input shares conv's output scale; bias mastered."""
    graph = conv_relu_graph()
    conv = make_quantable(graph, graph.operations['conv'])
    relu = make_quantable(graph, graph.operations['relu'])
    relu.input_quant_config[0].dominated_by = conv.output_quant_config[0]
    conv.input_quant_config[2].master_by = conv.input_quant_config[1]
    return graph, conv, relu


def all_configs(graph):
    return [config for op in graph.operations.values()
            for config in op.input_quant_config + op.output_quant_config]


@pytest.mark.parametrize('copy_value', [False, True])
def test_copy_has_the_same_structure_and_new_objects(copy_value):
    graph = conv_relu_graph()
    clone = graph.copy(copy_value)
    clone.check()
    assert structure(clone) == structure(graph) and clone.name == graph.name
    assert not {id(o) for o in clone.operations.values()} & {id(o) for o in
                                                             graph.operations.values()}
    assert all(clone.variables[name] is not var for name, var in graph.variables.items())
    assert clone.inputs['x'] is clone.variables['x'] and clone.outputs['z'] is clone.variables['z']


def test_shallow_copy_shares_parameter_tensors():
    graph = conv_relu_graph()
    clone = graph.copy()
    for name in ('w', 'b'):
        assert clone.variables[name].value is graph.variables[name].value
    clone.variables['w'].value.zero_()
    assert torch.count_nonzero(graph.variables['w'].value) == 0


def test_deep_copy_clones_parameter_tensors():
    graph = conv_relu_graph()
    original_w = graph.variables['w'].value.clone()
    clone = graph.copy(copy_value=True)
    for name in ('w', 'b'):
        copied, source = clone.variables[name].value, graph.variables[name].value
        assert copied is not source and copied.data_ptr() != source.data_ptr()
        assert same_bits(copied, source)
    clone.variables['w'].value.zero_()
    assert same_bits(graph.variables['w'].value, original_w)


def test_edits_of_a_copy_leave_the_original_alone():
    graph = conv_relu_graph()
    before = structure(graph)
    clone = graph.copy()
    clone.remove_operation(clone.operations['relu'], keep_coherence=True)
    clone.create_operation('Sigmoid', inputs=[clone.variables['y']])
    clone.variables['y'].shape = (1, 4, 6, 6)
    assert structure(graph) == before and graph.variables['y'].shape is None
    graph.check()


def test_copy_generates_the_names_the_original_would():
    graph = conv_relu_graph()
    graph.create_variable()
    clone = graph.copy()
    assert clone.create_variable().name == graph.create_variable().name == 'var_1'
    assert clone.create_operation('Relu').name == graph.create_operation('Relu').name


def test_copy_deep_copies_the_graph_annotations():
    graph = conv_relu_graph()
    graph.extension_attrib['exporter'] = {'name': 'dynamo'}
    clone = graph.copy()
    clone.extension_attrib['exporter']['name'] = 'torchscript'
    assert graph.extension_attrib == {'exporter': {'name': 'dynamo'}}


@pytest.mark.parametrize('copy_value', [False, True])
def test_quant_configs_are_cloned_and_relinked_inside_the_clone(copy_value):
    graph, conv, relu = quantized_graph()
    clone = graph.copy(copy_value)
    clone_conv, clone_relu = clone.operations['conv'], clone.operations['relu']
    assert type(clone_conv) is type(conv) and clone_conv.config is not conv.config
    assert not {id(c) for c in all_configs(clone)} & {id(c) for c in all_configs(graph)}
    assert clone_relu.input_quant_config[0].dominated_by is clone_conv.output_quant_config[0]
    assert clone_conv.input_quant_config[2].master_by is clone_conv.input_quant_config[1]
    assert relu.input_quant_config[0].dominated_by is conv.output_quant_config[0]
    clone_relu.input_quant_config[0].scale = 7.0
    assert conv.output_quant_config[0].scale.item() == pytest.approx(0.1)
    assert clone_conv.output_quant_config[0].scale.item() == 7.0


def test_links_to_configs_outside_the_graph_are_cloned_too():
    graph, conv, relu = quantized_graph()
    outside = TensorQuantizationConfig(scale=0.25)
    conv.output_quant_config[0].dominated_by = outside
    clone = graph.copy()
    root = clone.operations['relu'].input_quant_config[0].dominated_by
    assert root is not outside and root.scale.item() == 0.25
    assert clone.operations['conv'].output_quant_config[0].dominated_by is root


def test_copy_of_a_baked_graph_round_trips_on_its_own():
    graph, conv, _ = quantized_graph()
    fp32_w = graph.variables['w'].value.clone()
    conv.baking_parameters(fake_quantize)
    baked_w = graph.variables['w'].value.clone()
    for copy_value in (False, True):
        clone = graph.copy(copy_value)
        clone_conv = clone.operations['conv']
        assert clone_conv.input_quant_config[1].state is QuantizationStates.BAKED
        for _ in range(3):
            clone_conv.dequantize()
            assert same_bits(clone.variables['w'].value, fp32_w)
            assert same_bits(graph.variables['w'].value, baked_w)
            assert conv.input_quant_config[1].state is QuantizationStates.BAKED
            clone_conv.restore_quantize_state()
            assert same_bits(clone.variables['w'].value, baked_w)
