"""QuantableOperation: configs per tensor, baking, bit-exact dequantize/restore, copies."""
import pytest
import torch

from razorlib.ir import (Operation, OperationQuantizationConfig, QuantableOperation,
                         QuantizationStates)
from ir_helpers import conv_relu_graph, fake_quantize, make_quantable, same_bits

S = QuantizationStates


def quantable_conv(state=S.ACTIVATED):
    graph = conv_relu_graph()
    return graph, make_quantable(graph, graph.operations['conv'], state)


def values(op):
    return [var.value for var in op.parameters]


def test_built_from_an_operation_it_takes_over_its_place():
    graph = conv_relu_graph()
    conv = graph.operations['conv']
    conv.extension_attrib['fused'] = True
    quant = make_quantable(graph, conv)
    assert graph.operations['conv'] is quant and isinstance(quant, Operation)
    assert (quant.name, quant.type, quant.extension_attrib) == ('conv', 'Conv', {'fused': True})
    assert [v.name for v in quant.inputs] == ['x', 'w', 'b'] and quant.outputs[0].name == 'y'
    assert graph.variables['y'].source_op is quant and graph.variables['w'].dest_ops == [quant]
    graph.check()


def test_config_views_and_pairs():
    _, quant = quantable_conv()
    assert quant.input_quant_config is quant.config.input_quantization_config
    assert quant.output_quant_config is quant.config.output_quantization_config
    pairs = quant.config_with_variable
    assert [var.name for _, var in pairs] == ['x', 'w', 'b', 'y']
    assert [config for config, _ in pairs] == quant.input_quant_config + quant.output_quant_config


def test_config_with_variable_rejects_count_mismatch():
    graph, quant = quantable_conv()
    graph.create_link_with_op(graph.operations['relu'], quant)
    with pytest.raises(ValueError, match="operation 'conv' has 4 inputs but 3 input quant"):
        quant.config_with_variable
    config = OperationQuantizationConfig()
    op = Operation('lonely', 'Relu')
    op.outputs = [graph.variables['z']]
    with pytest.raises(ValueError, match="'lonely' has 1 outputs but 0 output quant"):
        QuantableOperation(op, config).config_with_variable


def test_baking_quantizes_activated_parameters_once():
    _, quant = quantable_conv()
    fp32 = [value.clone() for value in values(quant)]
    calls = []

    def quant_func(value, config):
        calls.append(config)
        return fake_quantize(value, config)
    quant.baking_parameters(quant_func)
    assert len(calls) == 2
    for value, original, config in zip(values(quant), fp32, quant.input_quant_config[1:]):
        assert same_bits(value, fake_quantize(original, config))
    assert [c.state for c in quant.input_quant_config] == [S.ACTIVATED, S.BAKED, S.BAKED]
    assert quant.output_quant_config[0].state is S.ACTIVATED
    quant.baking_parameters(quant_func)
    assert len(calls) == 2


def test_baking_passive_and_skipping_other_states():
    _, quant = quantable_conv()
    weight, bias = quant.input_quant_config[1:]
    weight.state, bias.state = S.INITIAL, S.PASSIVE
    w_before = quant.inputs[1].value
    quant.baking_parameters(fake_quantize)
    assert weight.state is S.INITIAL and quant.inputs[1].value is w_before
    assert bias.state is S.PASSIVE_BAKED


def all_same_bits(tensors, expected):
    return len(tensors) == len(expected) and all(map(same_bits, tensors, expected))


def assert_round_trips(quant, fp32, quantized, times=3):
    for _ in range(times):
        quant.dequantize()
        assert quant.is_dequantized
        assert all_same_bits(values(quant), fp32)
        assert all(c.state is S.FP32 for c in quant.input_quant_config + quant.output_quant_config)
        quant.restore_quantize_state()
        assert not quant.is_dequantized
        assert all_same_bits(values(quant), quantized)


def test_dequantize_restore_round_trips_are_bit_exact():
    _, quant = quantable_conv()
    fp32 = [value.clone() for value in values(quant)]
    quant.baking_parameters(fake_quantize)
    quantized = [value.clone() for value in values(quant)]
    assert not all_same_bits(fp32, quantized)
    states = [config.state for config, _ in quant.config_with_variable]
    assert_round_trips(quant, fp32, quantized)
    assert [config.state for config, _ in quant.config_with_variable] == states


def test_round_trips_survive_repeated_calls_and_unusual_values():
    _, quant = quantable_conv()
    weight = quant.inputs[1]
    weight.value = torch.tensor([0.1, -0.0, 1e-30, 3.4e38, float('nan')]).repeat(2)
    fp32 = [value.clone() for value in values(quant)]
    quant.baking_parameters(fake_quantize)
    quantized = [value.clone() for value in values(quant)]
    quant.dequantize()
    quant.dequantize()
    assert same_bits(weight.value, fp32[0])
    quant.restore_quantize_state()
    quant.restore_quantize_state()
    assert same_bits(weight.value, quantized[0])
    assert_round_trips(quant, fp32, quantized)


def test_dequantize_parameter_only_keeps_activation_states():
    _, quant = quantable_conv()
    quant.baking_parameters(fake_quantize)
    quant.dequantize(parameter_only=True)
    assert [c.state for c in quant.input_quant_config] == [S.ACTIVATED, S.FP32, S.FP32]
    assert quant.output_quant_config[0].state is S.ACTIVATED
    quant.restore_quantize_state()
    assert [c.state for c in quant.input_quant_config] == [S.ACTIVATED, S.BAKED, S.BAKED]


def test_dequantize_without_baking_only_switches_states():
    _, quant = quantable_conv()
    before = values(quant)
    quant.dequantize()
    assert all(a is b for a, b in zip(values(quant), before))
    assert quant.input_quant_config[1].state is S.FP32
    quant.restore_quantize_state()
    assert quant.input_quant_config[1].state is S.ACTIVATED


def test_store_parameter_value_is_what_dequantize_brings_back():
    _, quant = quantable_conv()
    quant.store_parameter_value()
    stored = [value.clone() for value in values(quant)]
    for var in quant.parameters:
        var.value = var.value * 0
    quant.dequantize()
    assert all_same_bits(values(quant), stored)


def test_parameter_values_keep_their_device_and_park_on_the_expire_device():
    _, quant = quantable_conv()
    quant.baking_parameters(fake_quantize)
    quant.dequantize(expire_device='meta')
    assert all(value.device.type == 'cpu' for value in values(quant))
    assert all(parked.device.type == 'meta' for parked in quant._parked_values.values())


def test_baking_or_storing_while_dequantized_is_refused():
    _, quant = quantable_conv()
    quant.dequantize()
    with pytest.raises(RuntimeError, match="'conv' is dequantized.*restore_quantize_state"):
        quant.baking_parameters(fake_quantize)
    with pytest.raises(RuntimeError, match="'conv' is dequantized"):
        quant.store_parameter_value()


def test_copy_is_unlinked_with_its_own_configs_and_parked_values():
    _, quant = quantable_conv()
    quant.baking_parameters(fake_quantize)
    quant.dequantize()
    clone = quant.copy()
    assert isinstance(clone, QuantableOperation) and clone.inputs == [] and clone.is_dequantized
    assert not set(clone.input_quant_config) & set(quant.input_quant_config)
    assert all(clone._parked_values[i] is quant._parked_values[i] for i in (1, 2))
    deep = quant.copy(copy_value=True)
    assert all(deep._parked_values[i] is not quant._parked_values[i] for i in (1, 2))
    assert all(torch.equal(deep._parked_values[i], quant._parked_values[i]) for i in (1, 2))
    given = OperationQuantizationConfig()
    assert quant.copy(config=given).config is given
