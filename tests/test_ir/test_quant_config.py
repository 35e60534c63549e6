"""Quantization configs: states, policies, dominance, masters, dequantize and copies."""
import pytest
import torch

from razorlib.ir import (OperationQuantizationConfig, QuantizationProperty, QuantizationStates,
                         RoundingPolicy, TensorQuantizationConfig, copy_configs,
                         copy_operation_configs)

S = QuantizationStates
P = QuantizationProperty
TQC = TensorQuantizationConfig


@pytest.mark.parametrize('state,activated,baked,passive', [
    (S.INITIAL, False, False, False), (S.ACTIVATED, True, False, False),
    (S.BAKED, False, True, False), (S.OVERLAPPED, False, False, False),
    (S.PASSIVE, True, False, True), (S.PASSIVE_BAKED, False, True, True),
    (S.FP32, False, False, False),
])
def test_state_helpers(state, activated, baked, passive):
    assert (state.is_activated, state.is_baked, state.is_passive) == (activated, baked, passive)
    assert state.is_quantized == (activated or baked)


def test_defaults_and_rounding_by_value():
    config = TQC(rounding='round_half_up')
    assert config.policy == P.PER_TENSOR | P.LINEAR | P.SYMMETRICAL
    assert config.rounding is RoundingPolicy.ROUND_HALF_UP
    assert (config.num_of_bits, config.quant_min, config.quant_max) == (8, -128, 127)
    assert config.scale is None and config.offset is None and config.state is S.INITIAL
    assert config.observer_algorithm == 'minmax' and config.channel_axis is None


@pytest.mark.parametrize('policy,missing', [
    (P.LINEAR | P.SYMMETRICAL, 'PER_TENSOR and PER_CHANNEL'),
    (P.PER_TENSOR | P.PER_CHANNEL | P.LINEAR | P.SYMMETRICAL, 'PER_TENSOR and PER_CHANNEL'),
    (P.PER_TENSOR | P.SYMMETRICAL, 'LINEAR and FLOATING'),
    (P.PER_TENSOR | P.LINEAR | P.POWER_OF_2, 'SYMMETRICAL and ASYMMETRICAL'),
])
def test_policy_needs_one_flag_of_each_choice(policy, missing):
    with pytest.raises(ValueError, match=f'exactly one of {missing}'):
        TQC(policy=policy)


def test_per_channel_needs_an_axis_and_range_must_be_valid():
    per_channel = P.PER_CHANNEL | P.LINEAR | P.ASYMMETRICAL | P.POWER_OF_2
    with pytest.raises(ValueError, match='needs a channel_axis'):
        TQC(policy=per_channel)
    assert TQC(policy=per_channel, channel_axis=0).channel_axis == 0
    with pytest.raises(ValueError, match='invalid integer range'):
        TQC(quant_min=5, quant_max=5)


def test_scale_and_offset_become_tensors():
    config = TQC(scale=[0.5, 0.25], offset=3)
    assert torch.equal(config.scale, torch.tensor([0.5, 0.25]))
    assert torch.equal(config.offset, torch.tensor(3))


def test_dominated_by_shares_scale_offset_and_state_through_the_root():
    a, b = TQC(scale=1.0), TQC(scale=2.0, offset=1, state=S.ACTIVATED)
    assert a.dominated_by is a
    a.dominated_by = b
    assert a.dominated_by is b and b.dominated_by is b
    assert a.scale.item() == 2.0 and a.offset.item() == 1 and a.state is S.ACTIVATED
    a.scale, a.state = 4.0, S.BAKED
    assert b.scale.item() == 4.0 and b.state is S.BAKED


def test_dominance_joins_whole_sets_and_reads_go_to_the_root():
    a, b, c, d = (TQC(scale=float(i)) for i in range(4))
    a.dominated_by = b
    c.dominated_by = d
    b.dominated_by = c
    for config in (a, b, c, d):
        assert config.dominated_by is d and config.scale.item() == 3.0
    a.dominated_by = d
    b.dominated_by = a
    assert all(config.dominated_by is d for config in (a, b, c, d))


def test_joining_a_set_moves_its_root_too():
    a, b, x = TQC(), TQC(), TQC(scale=9.0)
    a.dominated_by = x
    a.dominated_by = b
    assert x.dominated_by is b and x.scale is None


def test_long_chains_resolve_without_recursion():
    configs = [TQC() for _ in range(5000)]
    for child, parent in zip(configs, configs[1:]):
        child._parent = parent
    configs[-1].scale = 0.5
    assert configs[0].dominated_by is configs[-1] and configs[0].scale.item() == 0.5
    assert copy_configs(configs[:1])[0].scale.item() == 0.5


def test_dominated_by_rejects_non_configs():
    with pytest.raises(TypeError, match='dominated_by takes a TensorQuantizationConfig'):
        TQC().dominated_by = None


def test_master_by_is_a_plain_link():
    bias, weight = TQC(state=S.PASSIVE), TQC(scale=0.1)
    assert bias.master_by is None
    bias.master_by = weight
    assert bias.master_by is weight and bias.scale is None
    bias.master_by = None
    assert bias.master_by is None
    with pytest.raises(ValueError, match='its own master'):
        bias.master_by = bias
    with pytest.raises(TypeError, match='master_by takes'):
        bias.master_by = 'weight'


def test_dequantize_remembers_and_restores_the_state():
    config = TQC(state=S.BAKED)
    config.dequantize()
    assert config.state is S.FP32 and config.is_dequantized
    config.dequantize()
    config.restore_quantize_state()
    assert config.state is S.BAKED and not config.is_dequantized
    config.restore_quantize_state()
    assert config.state is S.BAKED


def test_fp32_configs_stay_fp32_and_setting_a_state_forgets_the_old_one():
    fp32 = TQC(state=S.FP32)
    fp32.dequantize()
    assert not fp32.is_dequantized
    config = TQC(state=S.ACTIVATED)
    config.dequantize()
    config.state = S.INITIAL
    config.restore_quantize_state()
    assert config.state is S.INITIAL


def test_dequantize_is_shared_by_a_dominated_set():
    a, b = TQC(), TQC(state=S.ACTIVATED)
    a.dominated_by = b
    a.dequantize()
    assert b.state is S.FP32 and b.is_dequantized
    b.restore_quantize_state()
    assert a.state is S.ACTIVATED


def test_copy_clones_fields_and_tensors():
    config = TQC(policy=P.PER_CHANNEL | P.LINEAR | P.ASYMMETRICAL, channel_axis=1,
                 num_of_bits=4, quant_min=0, quant_max=15, scale=[1.0, 2.0], offset=[0, 1],
                 observer_algorithm='percentile', state=S.ACTIVATED,
                 rounding=RoundingPolicy.ROUND_DOWN)
    clone = config.copy()
    assert clone is not config
    for field in ('policy', 'rounding', 'num_of_bits', 'quant_min', 'quant_max', 'channel_axis',
                  'observer_algorithm', 'state'):
        assert getattr(clone, field) == getattr(config, field), field
    assert torch.equal(clone.scale, config.scale) and clone.scale is not config.scale
    clone.scale.mul_(2)
    assert config.scale.tolist() == [1.0, 2.0]


def test_copy_configs_relinks_inside_the_copied_set():
    input_config, weight, bias, output = TQC(), TQC(), TQC(), TQC()
    output.dominated_by = input_config
    bias.master_by = weight
    clones = copy_configs([input_config, weight, bias, output, output])
    originals = {input_config, weight, bias, output}
    assert not originals & set(clones)
    assert clones[3] is clones[4]
    assert clones[3].dominated_by is clones[0] and clones[2].master_by is clones[1]


def test_copy_configs_clones_targets_outside_the_set():
    outside, inside, master = TQC(scale=0.5), TQC(), TQC()
    inside.dominated_by = outside
    inside.master_by = master
    clone = inside.copy()
    assert clone.dominated_by is not outside and clone.master_by is not master
    assert clone.scale.item() == 0.5
    clone.scale = 1.0
    assert outside.scale.item() == 0.5


def test_copy_keeps_a_dequantized_memory():
    config = TQC(state=S.BAKED)
    config.dequantize()
    clone = config.copy()
    clone.restore_quantize_state()
    assert clone.state is S.BAKED and config.state is S.FP32


def test_operation_config_copy_keeps_internal_links():
    weight, bias = TQC(), TQC(state=S.PASSIVE)
    bias.master_by = weight
    out = TQC()
    config = OperationQuantizationConfig([TQC(), weight, bias], [out])
    out.dominated_by = config.input_quantization_config[0]
    clone = config.copy()
    ins, outs = clone.input_quantization_config, clone.output_quantization_config
    assert len(ins) == 3 and len(outs) == 1
    assert ins[2].master_by is ins[1] and outs[0].dominated_by is ins[0]
    assert not set(ins + outs) & set(config.input_quantization_config + [out])


def test_copy_operation_configs_keeps_links_across_operations():
    producer = OperationQuantizationConfig([TQC()], [TQC(scale=0.2)])
    consumer = OperationQuantizationConfig([TQC()], [TQC()])
    consumer.input_quantization_config[0].dominated_by = producer.output_quantization_config[0]
    producer_clone, consumer_clone = copy_operation_configs([producer, consumer])
    assert (consumer_clone.input_quantization_config[0].dominated_by
            is producer_clone.output_quantization_config[0])
    single = consumer.copy()
    assert single.input_quantization_config[0].dominated_by is not \
        producer.output_quantization_config[0]


def test_reprs_are_readable():
    config = TQC(scale=0.5, state=S.ACTIVATED)
    config.master_by = TQC()
    assert 'ACTIVATED' in repr(config) and '8 bits [-128, 127]' in repr(config)
    assert 'mastered' in repr(config)
    assert repr(OperationQuantizationConfig([config], [])).startswith(
        'OperationQuantizationConfig(inputs=[TensorQuantizationConfig(ACTIVATED')
