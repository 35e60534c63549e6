"""dispatch_graph: the four dispatchers, SOI pinning, the dispatching table and the errors."""
import pytest

from razorlib.ir import BaseGraph
from razorlib.quantization import (DISPATCHERS, DispatchingTable, GraphDispatcher, TargetPlatform,
                                   dispatch_graph, quantize_graph, register_dispatcher)

from quant_graphs import dispatcher_graph, soi_onnx_graph

T, F, S = 'TRT_INT8', 'FP32', 'SOI'
SOI_PART = {'shape': S, 'gather': S, 'concat': S}
EXPECTED = {  # conv1 -> relu1 -> sig -> conv2 -> soft; add(soft, relu1) -> reshape
    'conservative': dict(conv1=T, relu1=T, sig=F, conv2=F, soft=F, add=F, reshape=F),
    'aggressive': dict(conv1=T, relu1=T, sig=F, conv2=T, soft=F, add=T, reshape=F),
    'pointwise': dict(conv1=T, relu1=T, sig=T, conv2=T, soft=F, add=F, reshape=F),
    'allin': dict(conv1=T, relu1=T, sig=T, conv2=T, soft=T, add=T, reshape=T),
}


def placement(graph):
    return {name: op.platform.name for name, op in graph.operations.items()}


@pytest.mark.parametrize('dispatcher', sorted(EXPECTED))
def test_each_dispatcher_follows_its_rule(dispatcher):
    graph = dispatch_graph(dispatcher_graph(), TargetPlatform.TRT_INT8, dispatcher)
    assert placement(graph) == {**EXPECTED[dispatcher], **SOI_PART}


def test_the_dispatchers_all_differ_on_one_graph():
    placements = [tuple(sorted(EXPECTED[name].items())) for name in EXPECTED]
    assert len(set(placements)) == 4


@pytest.mark.parametrize('dispatcher', sorted(EXPECTED))
@pytest.mark.parametrize('platform', ['TRT_INT8', 'ORT_INT8'])
def test_every_op_ends_with_a_platform(dispatcher, platform):
    graph = dispatch_graph(soi_onnx_graph(), platform, dispatcher)
    assert all(isinstance(op.platform, TargetPlatform)
               and op.platform is not TargetPlatform.UNSPECIFIED
               for op in graph.operations.values())
    assert {op.name for op in graph.operations.values() if op.platform is TargetPlatform.SOI} \
        >= {'shape', 'gather', 'concat', 'div', 'scales_concat'}


def test_platforms_follow_the_platforms_op_types():
    # ORT runs Softmax in int8, TensorRT does not.
    ort = placement(dispatch_graph(dispatcher_graph(), 'ORT_INT8', 'aggressive'))
    assert ort['soft'] == 'ORT_INT8' and ort['sig'] == 'ORT_INT8' and ort['reshape'] == 'ORT_INT8'


def test_table_overrides_are_pinned_before_the_rule_runs():
    graph = dispatch_graph(dispatcher_graph(), T, 'conservative', {'conv1': 'FP32'})
    assert placement(graph)['conv1'] == F
    assert placement(graph)['relu1'] == F  # its input now comes from FP32
    graph = dispatch_graph(dispatcher_graph(), T, 'conservative',
                           DispatchingTable({'soft': TargetPlatform.TRT_INT8, 'sig': 'trt_int8'}))
    assert {name: placement(graph)[name] for name in ('sig', 'conv2', 'soft', 'add')} == {
        'sig': T, 'conv2': T, 'soft': T, 'add': T}


def test_table_overrides_soi_and_can_choose_fp16():
    graph = dispatch_graph(dispatcher_graph(), T, 'allin', {'gather': 'FP32', 'soft': 'FP16'})
    assert placement(graph)['gather'] == F and placement(graph)['soft'] == 'FP16'
    assert placement(graph)['shape'] == S


def test_quantized_graphs_are_refused():
    graph = quantize_graph(dispatcher_graph(), T)
    with pytest.raises(ValueError, match="graph 'dispatch' is quantized already"):
        dispatch_graph(graph, T, 'allin')


def test_redispatching_replaces_earlier_platforms():
    graph = dispatch_graph(dispatcher_graph(), T, 'allin')
    assert placement(dispatch_graph(graph, T, 'conservative'))['conv2'] == F


def test_unknown_dispatcher_lists_the_known_ones():
    with pytest.raises(KeyError, match="no dispatcher 'fancy' in razorlib's registry; "
                       'registered: AggressiveDispatcher, .*, aggressive, allin, conservative, '
                       'pointwise'):
        dispatch_graph(dispatcher_graph(), T, 'fancy')


def test_dispatchers_are_built_from_names_dicts_or_taken_as_they_are():
    by_name = placement(dispatch_graph(dispatcher_graph(), T, 'allin'))
    assert placement(dispatch_graph(dispatcher_graph(), T, 'AllInDispatcher')) == by_name
    assert placement(dispatch_graph(dispatcher_graph(), T, dict(type='allin'))) == by_name
    built = DISPATCHERS.build(dict(type='AllInDispatcher'))
    assert placement(dispatch_graph(dispatcher_graph(), T, built)) == by_name


@pytest.mark.parametrize('kwargs,parameter', [
    (dict(dispatcher=3), 'dispatcher'),
    (dict(dispatcher=DISPATCHERS.get('allin')), 'dispatcher'),
    (dict(dispatching_table=[('conv1', 'FP32')]), 'dispatching_table'),
    (dict(platform=8), 'platform'),
    (dict(graph='graph'), 'graph'),
])
def test_wrong_types_name_the_parameter(kwargs, parameter):
    arguments = {**dict(graph=dispatcher_graph(), platform=T), **kwargs}
    with pytest.raises(TypeError, match=f'^{parameter}'):
        dispatch_graph(**arguments)


def test_platform_must_be_a_quantized_one():
    with pytest.raises(ValueError, match='quantized platform .*TRT_INT8, ORT_INT8.*FP32'):
        dispatch_graph(dispatcher_graph(), 'FP32')
    with pytest.raises(ValueError, match="no platform named 'INT4'"):
        dispatch_graph(dispatcher_graph(), 'INT4')


@pytest.mark.parametrize('platform', ['FP32', 'fp16'])
def test_quantizing_for_a_float_platform_is_refused_before_anything_changes(platform):
    graph = dispatcher_graph()
    with pytest.raises(ValueError, match=r'platform FP(32|16) is no quantized platform, '
                       'nothing would be quantized; quantized ones: TRT_INT8, ORT_INT8'):
        quantize_graph(graph, platform)
    assert {op.platform for op in graph.operations.values()} == {'UNSPECIFIED'}


def test_table_entries_are_validated():
    with pytest.raises(ValueError, match=r"names operations not in graph 'dispatch': \['nope'\]"):
        dispatch_graph(dispatcher_graph(), T, dispatching_table={'nope': 'FP32'})
    with pytest.raises(ValueError, match='UNSPECIFIED is not a platform an operation runs on'):
        DispatchingTable({'conv1': 'UNSPECIFIED'})
    with pytest.raises(ValueError, match="no platform named 'QDQ_ONNX'"):  # an export format
        DispatchingTable({'conv1': 'QDQ_ONNX'})
    with pytest.raises(TypeError, match='operation names must be strings'):
        DispatchingTable({1: 'FP32'})
    with pytest.raises(TypeError, match=r"dispatching_table\['conv1'\] must be a TargetPlatform"):
        DispatchingTable({'conv1': 1.5})


@pytest.mark.parametrize('dispatch', [dispatch_graph, quantize_graph])
def test_a_table_entry_on_another_quantized_platform_is_refused(dispatch):
    # quantize_graph quantizes only the ops on its platform: conv2 pinned to ORT_INT8 on a
    # TRT_INT8 graph stayed a plain op, and the "INT8" export ran it in floating point
    graph = dispatcher_graph()
    with pytest.raises(ValueError) as error:
        dispatch(graph, T, dispatching_table={'conv2': 'ORT_INT8', 'soft': 'FP32'})
    assert str(error.value) == (
        "dispatching_table places operations of graph 'dispatch' on a quantized platform "
        "other than TRT_INT8: {'conv2': 'ORT_INT8'}; only TRT_INT8 is quantized, so they "
        'would run in floating point (pin them to TRT_INT8, or to FP32 on purpose)')
    assert all(op.platform == 'UNSPECIFIED' for op in graph.operations.values())


def test_failed_dispatch_leaves_the_graph_alone():
    graph = dispatcher_graph()
    with pytest.raises(ValueError):
        dispatch_graph(graph, T, 'allin', {'nope': 'FP32'})
    assert all(op.platform == 'UNSPECIFIED' for op in graph.operations.values())


def test_table_is_a_readable_mapping():
    table = DispatchingTable({'a': 'FP32'})
    table['b'] = TargetPlatform.SOI
    assert list(table) == ['a', 'b'] and len(table) == 2 and 'a' in table
    assert dict(table.items()) == {'a': TargetPlatform.FP32, 'b': TargetPlatform.SOI}
    assert repr(table) == "DispatchingTable({'a': 'FP32', 'b': 'SOI'})"


def test_custom_dispatchers_register_by_class_and_short_name():
    @register_dispatcher
    class ComputeOnly(GraphDispatcher):
        name = 'compute_only'

        def select(self, graph, platform, pinned):
            return {name for name, op in graph.operations.items() if op.type == 'Conv'}

    try:
        for key in ('compute_only', 'ComputeOnly', dict(type='ComputeOnly')):
            graph = dispatch_graph(dispatcher_graph(), T, key)
            assert [n for n, p in placement(graph).items() if p == T] == ['conv1', 'conv2']
        with pytest.raises(KeyError, match='compute_only is already registered in dispatcher'):
            register_dispatcher(type('Other', (GraphDispatcher, ), {'name': 'compute_only'}))
    finally:
        for key in ('compute_only', 'ComputeOnly'):
            DISPATCHERS.module_dict.pop(key, None)


def test_empty_graph():
    assert dispatch_graph(BaseGraph(), T).operations == {}


def _after_a_float_op(convs):
    """Softmax (no INT8 type) -> ``convs`` Convs: conservative dispatch quantizes none."""
    graph = BaseGraph(name='float_first')
    x = graph.create_variable('x')
    graph.mark_variable_as_graph_input(x)
    out = graph.create_operation('Softmax', 'soft', inputs=[x],
                                 outputs=[graph.create_variable()]).outputs
    for i in range(convs):
        out = graph.create_operation('Conv', f'conv{i}', inputs=out,
                                     outputs=[graph.create_variable()]).outputs
    return graph


def test_conservative_dispatch_warns_when_most_quantizable_ops_stay_float():
    with pytest.warns(UserWarning, match=r"graph 'float_first': 3 of 3 op\(s\) of types "
                      r"quantizable on TRT_INT8 left in FP32 after a float op: conv0 \(Conv, "
                      r"after Softmax soft\), conv1 .*; dispatcher='aggressive' quantizes them"):
        graph = dispatch_graph(_after_a_float_op(3), TargetPlatform.TRT_INT8, 'conservative')
    assert {op.platform.name for op in graph.operations.values()} == {F}


def test_conservative_dispatch_logs_a_few_fallbacks_without_a_warning(caplog, recwarn):
    graph = dispatcher_graph()
    with caplog.at_level('INFO', logger='razorlib.quantization.dispatch.dispatchers'):
        dispatch_graph(graph, TargetPlatform.TRT_INT8, 'conservative')
    assert 'left in FP32 after a float op: conv2 (Conv, after Sigmoid sig)' in caplog.text
    assert not [w for w in recwarn if 'left in FP32' in str(w.message)]
