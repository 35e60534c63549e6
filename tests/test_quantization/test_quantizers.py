"""Quantizers: the configs they build, the links between them, what they leave alone."""
import pytest
import torch

from razorlib.ir import Operation, QuantableOperation
from razorlib.ir import QuantizationProperty as P
from razorlib.ir import QuantizationStates as S
from razorlib.quantization import (QUANTIZERS, ORTQDQQuantizer, QuantExecutor, TargetPlatform,
                                   TensorRTQuantizer, calibrate, fake_quantize, quantize_graph,
                                   quantizer_class)
from razorlib.quantization.quantizers import LINK_PASSES, ShareScales
from razorlib.registry import GRAPH_PASSES

from quant_graphs import GraphBuilder, conv_concat_graph, residual_graph

PER_TENSOR_SYM = P.PER_TENSOR | P.LINEAR | P.SYMMETRICAL
PER_CHANNEL_SYM = P.PER_CHANNEL | P.LINEAR | P.SYMMETRICAL
PER_TENSOR_ASYM = P.PER_TENSOR | P.LINEAR | P.ASYMMETRICAL


def summary(config):
    return (config.policy, config.num_of_bits, config.quant_min, config.quant_max,
            config.channel_axis, config.state)


def single_op(op_type, weight_shape, attributes=None, bias=False):
    b = GraphBuilder()
    b.param('w', torch.randn(*weight_shape))
    inputs = ['x', 'w']
    if bias:
        b.param('b', torch.randn(weight_shape[0]))
        inputs.append('b')
    b.op(op_type, 'op', inputs, attributes)
    return b.output('op')


def test_tensorrt_conv_configs():
    graph = quantize_graph(conv_concat_graph(), 'TRT_INT8')
    conv = graph.operations['conv_a']
    assert [summary(config) for config in conv.input_quant_config] == [
        (PER_TENSOR_SYM, 8, -128, 127, None, S.INITIAL),  # activation
        (PER_CHANNEL_SYM, 8, -127, 127, 0, S.INITIAL),  # weight, per output channel
        (PER_TENSOR_SYM, 8, -128, 127, None, S.FP32),  # bias stays FP32 for TensorRT
    ]
    assert conv.input_quant_config[0].observer_algorithm == 'percentile'
    assert conv.input_quant_config[1].observer_algorithm == 'minmax'


def test_ort_conv_configs_and_int32_bias():
    graph = quantize_graph(conv_concat_graph(), 'ORT_INT8')
    conv = graph.operations['conv_a']
    activation, weight, bias = conv.input_quant_config
    assert summary(activation) == (PER_TENSOR_ASYM, 8, 0, 255, None, S.INITIAL)
    assert summary(weight) == (PER_CHANNEL_SYM, 8, -127, 127, 0, S.INITIAL)
    assert summary(bias) == (PER_CHANNEL_SYM, 32, -2**31, 2**31 - 1, 0, S.INITIAL)
    assert bias.master_by is weight


@pytest.mark.parametrize('op_type,weight_shape,attributes,axis', [
    ('Conv', (8, 3, 3, 3), {}, 0),
    ('ConvTranspose', (3, 8, 3, 3), {}, 1),
    ('Gemm', (8, 16), {'transB': 1}, 0),
    ('Gemm', (16, 8), {}, 1),
    ('MatMul', (16, 8), {}, 1),
    ('MatMul', (2, 16, 8), {}, 2),
])
@pytest.mark.parametrize('quantizer', [TensorRTQuantizer, ORTQDQQuantizer])
def test_weights_are_per_channel_on_the_output_channel_axis(quantizer, op_type, weight_shape,
                                                            attributes, axis):
    op = quantizer(single_op(op_type, weight_shape, attributes)).quantize_operation('op')
    weight = op.input_quant_config[1]
    assert (weight.policy, weight.channel_axis) == (PER_CHANNEL_SYM, axis)


def test_a_weight_that_is_an_activation_is_quantized_per_tensor():
    b = GraphBuilder(inputs=('q', 'k'))
    b.op('MatMul', 'scores', ['q', 'k'])
    op = TensorRTQuantizer(b.output('scores')).quantize_operation('scores')
    assert [summary(config) for config in op.input_quant_config] == [
        (PER_TENSOR_SYM, 8, -128, 127, None, S.INITIAL)] * 2


def test_norm_weights_per_tensor_shift_and_statistics_fp32():
    b = GraphBuilder()
    for name in ('scale', 'shift', 'mean', 'var'):
        b.param(name, torch.ones(4))
    b.op('BatchNormalization', 'bn', ['x', 'scale', 'shift', 'mean', 'var'])
    op = ORTQDQQuantizer(b.output('bn')).quantize_operation('bn')
    assert [config.state for config in op.input_quant_config] == [S.INITIAL, S.INITIAL] + [
        S.FP32] * 3
    assert op.input_quant_config[1].policy == PER_TENSOR_SYM


def test_conv_relu_fusion_overlaps_the_conv_output():
    graph = quantize_graph(conv_concat_graph(), 'TRT_INT8')
    conv, relu = graph.operations['conv_a'], graph.operations['relu_a']
    fused = relu.output_quant_config[0]
    for config in (conv.output_quant_config[0], relu.input_quant_config[0]):
        assert config.state is S.OVERLAPPED and config.master_by is fused
        assert config.dominated_by is config  # overlapped, not dominated
    assert fused.state is S.INITIAL


@pytest.mark.parametrize('platform', ['TRT_INT8', 'ORT_INT8'])
def test_concat_inputs_and_output_share_one_scale(platform):
    graph = quantize_graph(conv_concat_graph(), platform)
    concat = graph.operations['concat']
    root = concat.output_quant_config[0].dominated_by
    shared = [*concat.input_quant_config, graph.operations['relu_a'].output_quant_config[0],
              graph.operations['conv_b'].output_quant_config[0]]
    assert all(config.dominated_by is root for config in shared)
    concat.output_quant_config[0].scale = 0.5
    assert graph.operations['conv_b'].output_quant_config[0].scale.item() == 0.5


def test_readers_of_one_activation_share_its_scale():
    graph = quantize_graph(conv_concat_graph(), 'TRT_INT8')
    first, second = (graph.operations[name].input_quant_config[0] for name in ('conv_a', 'conv_b'))
    assert first.dominated_by is second.dominated_by


def residual_relu_graph(second_conv: bool = False):
    """x -> conv_a -> add(conv_a, y or conv_b(x)) -> relu (graph output)."""
    b = GraphBuilder('residual_relu', inputs=('x', 'y'))
    for branch in 'ab':
        b.param(f'w{branch}', torch.randn(4, 4, 1, 1))
    b.op('Conv', 'conv_a', ['x', 'wa'])
    if second_conv:
        b.op('Conv', 'conv_b', ['x', 'wb'])
    b.op('Add', 'add', ['conv_a', 'conv_b' if second_conv else 'y'])
    b.op('Relu', 'relu', ['add'])
    return b.output('relu')


def test_add_inputs_share_a_scale_on_tensorrt_only():
    b = GraphBuilder('two_branches', inputs=('x', 'y'))
    for branch, source in (('a', 'x'), ('b', 'y')):
        b.param(f'w{branch}', torch.randn(4, 4, 1, 1))
        b.op('Conv', f'conv_{branch}', [source, f'w{branch}'])
        b.op('Relu', f'relu_{branch}', [f'conv_{branch}'])
    b.op('Add', 'add', ['relu_a', 'relu_b'])  # no compute op feeds it: nothing fuses
    graph = b.output('add')
    trt = quantize_graph(graph.copy(), 'TRT_INT8').operations['add'].input_quant_config
    ort = quantize_graph(graph.copy(), 'ORT_INT8').operations['add'].input_quant_config
    assert [config.state for config in trt] == [S.INITIAL, S.INITIAL]
    assert trt[0].dominated_by is trt[1].dominated_by
    assert ort[0].dominated_by is not ort[1].dominated_by


def test_a_conv_feeding_an_add_is_fused_into_it_on_tensorrt_only():
    trt = quantize_graph(residual_graph(), 'TRT_INT8')
    conv, add = trt.operations['conv'], trt.operations['add']
    fused = add.output_quant_config[0]
    for config in (conv.output_quant_config[0], add.input_quant_config[0]):
        assert config.state is S.OVERLAPPED and config.master_by is fused
    assert add.input_quant_config[1].state is S.INITIAL and fused.state is S.INITIAL
    ort = quantize_graph(residual_graph(), 'ORT_INT8').operations['add'].input_quant_config
    assert [config.state for config in ort] == [S.INITIAL, S.INITIAL]
    assert ort[0].dominated_by is not ort[1].dominated_by


def test_conv_add_relu_is_quantized_once_after_the_relu_on_tensorrt():
    graph = quantize_graph(residual_relu_graph(), 'TRT_INT8')
    conv, add, relu = (graph.operations[name] for name in ('conv_a', 'add', 'relu'))
    fused = relu.output_quant_config[0]
    overlapped = (conv.output_quant_config[0], add.input_quant_config[0],
                  add.output_quant_config[0], relu.input_quant_config[0])
    assert all(c.state is S.OVERLAPPED and c.master_by is fused for c in overlapped)
    assert add.input_quant_config[1].state is S.INITIAL  # the residual stays int8


def test_an_add_of_two_convs_fuses_the_first_and_quantizes_the_second():
    graph = quantize_graph(residual_relu_graph(second_conv=True), 'TRT_INT8')
    conv_a, conv_b, add = (graph.operations[name] for name in ('conv_a', 'conv_b', 'add'))
    assert conv_a.output_quant_config[0].state is S.OVERLAPPED
    residual = add.input_quant_config[1]
    assert residual.state is S.INITIAL
    assert residual.dominated_by is conv_b.output_quant_config[0].dominated_by


def test_the_executor_computes_the_fused_residual_as_tensorrt_does():
    graph = quantize_graph(residual_relu_graph(), 'TRT_INT8')
    x, y = torch.randn(2, 4, 5, 5), torch.randn(2, 4, 5, 5)
    graph = calibrate(graph, [[x, y]], progress=False)
    conv, add, relu = (graph.operations[name] for name in ('conv_a', 'add', 'relu'))
    data, weight = conv.input_quant_config
    conv_out = torch.nn.functional.conv2d(fake_quantize(x, data),
                                          fake_quantize(graph.variables['wa'].value, weight))
    residual = fake_quantize(y, add.input_quant_config[1])  # the sum quantized only once:
    expected = fake_quantize(torch.relu(conv_out + residual), relu.output_quant_config[0])
    out = QuantExecutor(graph)([x, y])[0]
    torch.testing.assert_close(out, expected)


def test_link_counts():
    quantizer = ORTQDQQuantizer(conv_concat_graph())
    for name in ('conv_a', 'relu_a', 'conv_b', 'concat'):  # undispatched ops are accepted
        quantizer.quantize_operation(name)
    # readers: x (conv_a, conv_b), relu_a -> concat, conv_b -> concat
    graph = quantizer.graph
    links = {link.__name__: link(quantizer)(graph).changes for link in LINK_PASSES}
    assert links == {'FuseActivations': 1, 'FuseResidualAdds': 0, 'ShareScales': 2,
                     'MasterBiases': 2, 'JoinVariableReaders': 3}
    assert not quantizer.link_configs().modified  # linked already: nothing left to link


def test_link_configs_runs_the_link_passes_through_a_pass_manager():
    quantizer = ORTQDQQuantizer(conv_concat_graph())
    for name in ('conv_a', 'relu_a', 'conv_b', 'concat'):
        quantizer.quantize_operation(name)
    result = quantizer.link_configs()
    assert result.graph is quantizer.graph and (result.modified, result.changes) == (True, 8)
    assert GRAPH_PASSES.get('share_scales') is GRAPH_PASSES.get('ShareScales') is ShareScales


def test_fp32_and_soi_ops_are_left_untouched():
    graph = conv_concat_graph()
    soft = graph.operations['soft']
    attributes = dict(soft.attributes)
    quantize_graph(graph, 'TRT_INT8')
    assert graph.operations['soft'] is soft and type(soft) is Operation
    assert soft.platform is TargetPlatform.FP32 and soft.attributes == attributes
    quantized = {name for name, op in graph.operations.items()
                 if isinstance(op, QuantableOperation)}
    assert quantized == {'conv_a', 'relu_a', 'conv_b', 'concat'}
    graph.check()


def test_values_from_soi_ops_and_shape_inputs_stay_fp32():
    b = GraphBuilder()
    b.param('one', torch.tensor(1))
    b.param('flat', torch.tensor([0, -1]))
    b.op('Shape', 'shape', ['x'])
    b.op('Gather', 'gather', ['shape', 'one'])
    b.op('Cast', 'cast', ['gather'], {'to': 1})
    b.op('Mul', 'mul', ['x', 'cast'])
    b.op('Reshape', 'reshape', ['mul', 'flat'])
    graph = quantize_graph(b.output('reshape'), 'TRT_INT8', 'allin')
    mul, reshape = graph.operations['mul'], graph.operations['reshape']
    assert [config.state for config in mul.input_quant_config] == [S.INITIAL, S.FP32]
    assert [config.state for config in reshape.input_quant_config] == [S.INITIAL, S.FP32]
    assert reshape.input_quant_config[0].dominated_by is reshape.output_quant_config[0].dominated_by
    assert all(type(graph.operations[name]) is Operation for name in ('shape', 'gather', 'cast'))


def test_quantize_operation_refuses():
    graph = quantize_graph(conv_concat_graph(), 'TRT_INT8')
    quantizer = TensorRTQuantizer(graph)
    with pytest.raises(ValueError, match="no operation 'nope'"):
        quantizer.quantize_operation('nope')
    with pytest.raises(ValueError, match="'conv_a' is quantized already"):
        quantizer.quantize_operation('conv_a')
    with pytest.raises(ValueError, match="'soft' is dispatched to FP32, not TRT_INT8"):
        quantizer.quantize_operation('soft')


def test_quantize_graph_refuses():
    with pytest.raises(ValueError, match='platform FP32 is no quantized platform'):
        quantize_graph(conv_concat_graph(), TargetPlatform.FP32)
    graph = quantize_graph(conv_concat_graph(), 'TRT_INT8')
    with pytest.raises(ValueError, match='is quantized already'):
        quantize_graph(graph, 'TRT_INT8')


def test_quantizers_are_registered_by_platform_and_class_name():
    assert quantizer_class(TargetPlatform.TRT_INT8) is QUANTIZERS.get('TRT_INT8') \
        is QUANTIZERS.get('TensorRTQuantizer') is TensorRTQuantizer
    assert quantizer_class('ORT_INT8') is ORTQDQQuantizer
    with pytest.raises(KeyError, match="no quantizer 'FP16'.*registered: ORTQDQQuantizer, "
                       'ORT_INT8, TRT_INT8, TensorRTQuantizer'):
        quantizer_class('FP16')


def test_copies_keep_the_links():
    clone = quantize_graph(conv_concat_graph(), 'TRT_INT8').copy()
    conv, relu = clone.operations['conv_a'], clone.operations['relu_a']
    assert conv.output_quant_config[0].master_by is relu.output_quant_config[0]
    assert relu.output_quant_config[0].dominated_by is \
        clone.operations['concat'].output_quant_config[0].dominated_by


def test_bias_follows_the_granularity_of_its_weight():
    b = GraphBuilder(inputs=('x', 'w'))
    b.param('b', torch.randn(8))
    b.op('Gemm', 'fc', ['x', 'w', 'b'], {'transB': 1})
    fc = ORTQDQQuantizer(b.output('fc')).quantize_operation('fc')
    weight, bias = fc.input_quant_config[1:]
    assert weight.policy == PER_TENSOR_ASYM  # an activation: not a parameter
    assert (bias.policy, bias.num_of_bits) == (PER_TENSOR_SYM, 32)
