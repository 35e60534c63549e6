"""Wrong settings, arguments and batches are refused up front, with a message naming them.

PTQSettings, quantize_torch_model / quantize_onnx_model, graph_batches and MixedPrecision
check types, ranges, registered names and the options of config dicts before any work;
calibration batches are checked against the graph's inputs (number, dtype) as they come.
"""
import logging
import math
import re

import numpy as np
import pytest
import torch
from torch import nn

import razorlib.quantization.api as api
from razorlib.ir import from_torch
from razorlib.ir.executor.shapes import InputDtypeError
from razorlib.quantization import (MixedPrecision, PTQSettings, graph_batches,
                                   quantable_operations, quantize_onnx_model,
                                   quantize_torch_model)
from razorlib.quantization.api import check_options, check_quantize_arguments
from razorlib.quantization.batches import checked_inputs
from razorlib.registry import PTQ_PASSES


def conv_net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
                         nn.Conv2d(8, 4, 3, padding=1)).eval()


def data(count=2):
    generator = torch.Generator().manual_seed(1)
    return [torch.randn(2, 3, 8, 8, generator=generator) for _ in range(count)]


def scales(graph):
    return [config.scale for op in quantable_operations(graph)
            for config in (*op.input_quant_config, *op.output_quant_config)
            if config.scale is not None]


# PTQSettings

STEPS = 'must be an integer (a number of batches), got'


@pytest.mark.parametrize('section, error, message', [
    (dict(calib_steps='8'), TypeError, f"ptq.calib_steps {STEPS} '8' (str)"),
    (dict(calib_steps=2.5), TypeError, f'ptq.calib_steps {STEPS} 2.5 (float)'),
    (dict(calib_steps=True), TypeError, f'ptq.calib_steps {STEPS} True (bool)'),
    (dict(calib_steps=-3), ValueError, 'ptq.calib_steps must be at least 1, got -3'),
    (dict(dynamic_batch='no'), TypeError,
     "ptq.dynamic_batch must be True or False, got str 'no'"),
    (dict(dynamic_batch=1), TypeError, 'ptq.dynamic_batch must be True or False, got int 1'),
    (dict(passes='FuseBatchNorm'), TypeError,
     "ptq.passes must be a list of names or dicts, got the str 'FuseBatchNorm'; "
     "write ['FuseBatchNorm']"),
    (dict(passes=None), TypeError, 'ptq.passes must be a list of names or dicts, got NoneType'),
    (dict(ptq_passes='AdaRound'), TypeError,
     "ptq.ptq_passes must be a list of names or dicts, got the str 'AdaRound'; "
     "write ['AdaRound']"),
    (dict(ptq_passes=dict(type='AdaRound')), TypeError,
     "ptq.ptq_passes must be a list of names or dicts, got the dict"),
    (dict(passes=['FuseBN']), KeyError,
     "ptq.passes: no graph pass 'FuseBN' in razorlib's registry; registered: "),
    (dict(passes=[dict(type='FuseBatchNorm', eps=1e-5)]), TypeError,
     "ptq.passes: FuseBatchNorm() takes no arguments, got option 'eps'"),
    (dict(ptq_passes=['Adaround']), KeyError, "ptq.ptq_passes: no ptq pass 'Adaround'"),
    (dict(ptq_passes=[dict(type='AdaRound', step=5)]), TypeError,
     "ptq.ptq_passes: AdaRound.__init__() got an unexpected keyword argument 'step' "
     "(did you mean 'steps'?); AdaRound takes steps, batch_size, lr"),
    (dict(ptq_passes=[dict(type='MixedPrecision', target_snr_db='30')]), TypeError,
     "ptq.ptq_passes: MixedPrecision: target_snr_db must be a number, got '30' (str)"),
    (dict(observer=dict(type='kl', binz=3)), TypeError,
     "ptq.observer: KLObserver.__init__() got an unexpected keyword argument 'binz' "
     "(did you mean 'bins'?); KLObserver takes bins"),
    (dict(observer=dict(type='kl', channel_axis=1)), TypeError,
     "ptq.observer: KLObserver.__init__() got an unexpected keyword argument 'channel_axis'"),
    (dict(dispatcher=dict(type='conservative', x=3)), TypeError,
     "ptq.dispatcher: ConservativeDispatcher() takes no arguments, got option 'x'"),
    (dict(export=dict(type='QDQ_ONNX', opset=11)), TypeError,
     "ptq.export: export_qdq_onnx() takes no options, got option 'opset'"),
])
def test_a_wrong_setting_is_an_error_naming_it(section, error, message):
    with pytest.raises(error) as raised:
        PTQSettings.from_config(section)
    assert message in (raised.value.args[0] if raised.value.args else str(raised.value))


def test_well_formed_settings_still_pass():
    settings = PTQSettings.from_config(dict(
        calib_steps=np.int64(4), dynamic_batch=False,
        passes=[dict(type='FuseBatchNorm'), 'DeleteIsolated'],
        observer=dict(type='PercentileObserver', percentile=99.9),
        ptq_passes=[dict(type='AdaRound', steps=5), dict(type='MixedPrecision',
                                                         target_snr_db=30)],
        export=dict(type='TRT_JSON')))
    assert settings.passes == (dict(type='FuseBatchNorm'), 'DeleteIsolated')
    assert settings.export_format.name == 'TRT_JSON' and settings.calib_steps == 4


def test_check_options_takes_anything_a_kwargs_constructor_takes():
    def exporter(graph, path, **options):
        return options

    def plain(graph, path):
        return path

    check_options(exporter, {'opset': 11}, 'export', skip=['graph', 'path'])
    with pytest.raises(TypeError, match=r"^export: plain\(\) takes no options, got option "
                                        r"'opset'$"):
        check_options(plain, {'opset': 11}, 'export', skip=['graph', 'path'])


# quantize_torch_model / quantize_onnx_model


@pytest.fixture
def no_export(monkeypatch):
    """Exporting fails the test: the arguments must be refused before it."""
    def refuse(*args, **kwargs):
        raise AssertionError('exported the model before checking the arguments')
    monkeypatch.setattr(api, 'from_torch', refuse)
    monkeypatch.setattr(api, 'from_onnx', refuse)


@pytest.mark.parametrize('kwargs, error, message', [
    (dict(calib_steps='4'), TypeError, f"calib_steps {STEPS} '4' (str)"),
    (dict(calib_steps=2.5), TypeError, f'calib_steps {STEPS} 2.5 (float)'),
    (dict(dynamic_batch='no'), TypeError, "dynamic_batch must be True or False, got str 'no'"),
    (dict(passes=['FuseBN']), KeyError, "passes: no graph pass 'FuseBN'"),
    (dict(ptq_passes='AdaRound'), TypeError, "write ['AdaRound']"),
    (dict(ptq_passes=[dict(type='MixedPrecision', target_snr_db='30')]), TypeError,
     "ptq_passes: MixedPrecision: target_snr_db must be a number, got '30' (str)"),
    (dict(observer=dict(type='percentile', percentil=99)), TypeError,
     "observer: PercentileObserver.__init__() got an unexpected keyword argument "
     "'percentil' (did you mean 'percentile'?)"),
    (dict(observer_options={'percentile': {'foo': 1}}), TypeError,
     "observer_options['percentile']: PercentileObserver.__init__() got an unexpected "
     "keyword argument 'foo'"),
    (dict(observer_options={'percentil': {}}), KeyError,
     "observer_options['percentil']: no observer 'percentil'"),
    (dict(observer_options={'kl': 2048}), TypeError,
     "observer_options['kl'] must be a dict of options, got int 2048"),
    (dict(dispatcher=dict(type='conservative', foo=1)), TypeError,
     "dispatcher: ConservativeDispatcher() takes no arguments, got option 'foo'"),
    # values the observer refuses: were raised at calibration, after the export
    (dict(observer_options={'percentile': {'percentile': 200}}), ValueError,
     "observer_options['percentile']: percentile must lie in (0, 100], got 200"),
    (dict(observer=dict(type='percentile', percentile=0)), ValueError,
     'observer: percentile must lie in (0, 100], got 0'),
])
def test_quantize_torch_model_refuses_wrong_arguments_before_exporting(
        kwargs, error, message, no_export):
    with pytest.raises(error) as raised:
        quantize_torch_model(conv_net(), data(), data()[0], progress=False, **kwargs)
    assert message in raised.value.args[0]


def test_quantize_onnx_model_checks_its_arguments_too(no_export):
    with pytest.raises(TypeError, match=re.escape(f"calib_steps {STEPS} '4' (str)")):
        quantize_onnx_model('model.onnx', data(), calib_steps='4', progress=False)


def test_a_graph_is_refused_with_a_pointer_to_quantize_graph():
    graph = from_torch(conv_net(), data()[0])
    with pytest.raises(TypeError, match=r'quantize_torch_model: model must be a torch.nn.Module, '
                                        r'got BaseGraph; quantize a graph with quantize_graph'):
        quantize_torch_model(graph, data(), data()[0], progress=False)
    with pytest.raises(TypeError, match='quantize_onnx_model: model must be an onnx.ModelProto '
                                        'or a path, got BaseGraph; .*quantize_graph'):
        quantize_onnx_model(graph, data(), progress=False)


@pytest.mark.parametrize('dtype', [torch.int64, torch.float64])
@pytest.mark.parametrize('ptq_passes', [(), ['BiasCorrection']])
def test_a_batch_of_another_dtype_is_an_error_naming_the_batch(dtype, ptq_passes):
    batches = [data()[0], data()[1].to(dtype)]
    message = (f"calibration batch 1: graph '.*': input '.*' expects dtype torch.float32, "
               f"got {dtype}; convert the tensor")
    with pytest.raises(InputDtypeError, match=message):
        quantize_torch_model(conv_net(), batches, data()[0], progress=False,
                             ptq_passes=ptq_passes)


def test_a_float16_batch_is_widened_exactly():
    halves = [batch.half() for batch in data()]
    graph = quantize_torch_model(conv_net(), halves, data()[0], progress=False)
    widened = quantize_torch_model(conv_net(), [h.float() for h in halves], data()[0],
                                   progress=False)
    assert all(torch.equal(a, b) for a, b in zip(scales(graph), scales(widened)))


def test_numpy_batches_are_taken_as_tensors():
    graph = quantize_torch_model(conv_net(), [b.numpy() for b in data()], data()[0],
                                 progress=False)
    reference = quantize_torch_model(conv_net(), data(), data()[0], progress=False)
    assert all(torch.equal(a, b) for a, b in zip(scales(graph), scales(reference)))


def test_an_inputs_labels_pair_gets_a_collate_fn_hint():
    with pytest.raises(ValueError, match=r"calibration batch 0: graph '.*' has 1 inputs "
                                         r"\['.*'\], got a tuple of 2; a dataloader that yields "
                                         r"\(inputs, labels\) needs a collate_fn"):
        quantize_torch_model(conv_net(), [(b, 0) for b in data()], data()[0], progress=False)
    graph = quantize_torch_model(conv_net(), [(b, 0) for b in data()], data()[0],
                                 collate_fn=lambda batch: batch[0], progress=False)
    assert scales(graph)


def test_options_of_an_observer_not_in_use_are_warned_about(caplog):
    with caplog.at_level(logging.WARNING, logger='razorlib.quantization.api'):
        quantize_torch_model(conv_net(), data(), data()[0], progress=False,
                             observer='percentile', observer_options={'kl': {'bins': 512}})
    assert "no config of graph 'main_graph' uses observer 'kl', so its options {'bins': 512} " \
        'are not used; the observers in use are MinMaxObserver, PercentileObserver' \
        in caplog.text


def test_check_quantize_arguments_takes_built_passes_and_none_observer():
    from razorlib.ir.passes import build_pass
    from razorlib.quantization.passes import build_ptq_pass
    check_quantize_arguments(observer=None, passes=[build_pass('fuse_bn')],
                             ptq_passes=(build_ptq_pass('BiasCorrection'),))


# graph_batches and checked_inputs


@pytest.mark.parametrize('steps, error, message', [
    (2.5, TypeError, 'steps must be an integer (a number of batches), got 2.5 (float)'),
    ('4', TypeError, "steps must be an integer (a number of batches), got '4' (str)"),
    (True, TypeError, 'steps must be an integer (a number of batches), got True (bool)'),
    (0, ValueError, 'steps must be at least 1, got 0'),
])
def test_graph_batches_checks_steps_before_iterating(steps, error, message):
    with pytest.raises(error, match=re.escape(message)):
        next(graph_batches(data(), steps))


def test_graph_batches_takes_a_numpy_array_as_one_tensor():
    arrays = [np.zeros((2, 3), np.float32), np.ones((2, 3), np.float32)]
    batches = list(graph_batches(arrays, np.int64(5)))
    assert [type(b) for b in batches] == [torch.Tensor, torch.Tensor]
    assert batches[1].shape == (2, 3)


def test_checked_inputs_casts_exactly_and_names_the_batch():
    from razorlib.ir import BaseGraph
    graph = BaseGraph()
    for name, dtype in (('x', torch.float32), ('ids', torch.int64)):
        graph.mark_variable_as_graph_input(graph.create_variable(name, dtype=dtype))
    collate = checked_inputs(graph, where='analysis batch')
    x, ids = collate([np.zeros(2, np.float16), torch.arange(3, dtype=torch.int32)])
    assert (x.dtype, ids.dtype) == (torch.float32, torch.int64)
    assert collate({'x': torch.zeros(2)})['x'].dtype == torch.float32
    with pytest.raises(InputDtypeError, match="analysis batch 2: graph 'graph': input 'ids' "
                                              "expects dtype torch.int64, got torch.float32"):
        collate((torch.zeros(2), torch.zeros(3)))


# MixedPrecision


@pytest.mark.parametrize('kwargs, error, message', [
    (dict(target_snr_db='30'), TypeError, "target_snr_db must be a number, got '30' (str)"),
    (dict(target_snr_db=True), TypeError, 'target_snr_db must be a number, got True (bool)'),
    (dict(target_snr_db=math.nan), ValueError, 'target_snr_db must be a number, got nan'),
    (dict(metric=3), TypeError, 'metric must be a function of the graph, got int 3'),
    (dict(target_snr_db=30, max_drop='1'), TypeError, "max_drop must be a number, got '1' (str)"),
    (dict(metric=len, max_drop=-1), ValueError, 'max_drop must be at least 0, got -1'),
    (dict(target_snr_db=30, max_layers=1.5), TypeError,
     'max_layers must be an integer (or None), got 1.5 (float)'),
    (dict(target_snr_db=30, max_layers=-1), ValueError,
     'max_layers must be at least 0, got -1'),
    (dict(target_snr_db=30, steps=0), ValueError, 'steps must be at least 1, got 0'),
    (dict(target_snr_db=30, steps=False), TypeError,
     'steps must be an integer (or None), got False (bool)'),
    (dict(target_snr_db=30, layers='conv'), TypeError,
     "layers must be a list of layer names or None, got 'conv'; write [...] around"),
    (dict(target_snr_db=30, layers=[1]), TypeError,
     'layers must be a list of layer names or None, got [1]'),
])
def test_mixed_precision_checks_its_arguments(kwargs, error, message):
    with pytest.raises(error) as raised:
        MixedPrecision(**kwargs)
    assert raised.value.args[0].startswith('MixedPrecision: ' + message)


def test_mixed_precision_takes_well_formed_arguments():
    MixedPrecision(target_snr_db=30, max_layers=0, steps=2, layers=('a', 'b'))
    MixedPrecision(metric=lambda graph: 1.0, max_drop=0.5)


@pytest.mark.parametrize('options, message', [
    (dict(steps='5'), "AdaRound: steps must be an integer (Adam steps per layer), got '5' (str)"),
    (dict(batch_size=8.0), 'AdaRound: batch_size must be an integer (samples per step), got 8.0'),
    (dict(lr='0.1'), "AdaRound: lr must be a number, got '0.1' (str)"),
])
def test_adaround_refuses_options_of_the_wrong_type_by_name(options, message):
    # steps='5' failed in a bare '<' comparison
    with pytest.raises(TypeError, match=re.escape(message)):
        PTQ_PASSES.build(dict(type='AdaRound', **options))


# the other PTQ passes: options checked when the pass is built, naming the option


@pytest.mark.parametrize('options, error, message', [
    # a bare name was read one character at a time, and refused after calibration as
    # "no quantized weight layer named ['c', 'o', 'n', 'v']" (or centred nothing)
    (dict(type='AdaRound', layers='conv'), TypeError,
     "AdaRound: layers must be a list of layer names or None, got 'conv'; write [...] around"),
    (dict(type='BiasCorrection', layers='conv'), TypeError,
     "BiasCorrection: layers must be a list of layer names or None, got 'conv'; write [...]"),
    (dict(type='ActivationCentering', clips='relu6'), TypeError,
     "ActivationCentering: clips must be a list of Clip names or None, got 'relu6'; write"),
    (dict(type='ActivationScaleSearch', scales='conv:in0'), TypeError,
     "ActivationScaleSearch: scales must be a list of scale names or None, got 'conv:in0'"),
    (dict(type='AdaRound', layers=[3]), TypeError,
     'AdaRound: layers must be a list of layer names or None, got [3]'),
    # accepted, then an IndexError or a silently different annealing in the Adam loop
    (dict(type='AdaRound', beta=(20, )), TypeError,
     'AdaRound: beta must be a pair (start, end), got (20,)'),
    (dict(type='AdaRound', beta=('20', 2)), TypeError,
     "AdaRound: beta must be a number, got '20' (str)"),
    (dict(type='AdaRound', seed='0'), TypeError,
     "AdaRound: seed must be an integer (a random seed), got '0' (str)"),
    # refused by torch.optim.Adam, after calibration, as 'Invalid learning rate: -1.0'
    (dict(type='AdaRound', lr=-1), ValueError,
     'AdaRound: lr must be > 0 and reg_weight >= 0, got -1.0 and 10.0'),
    # these failed in a bare "'<' not supported between instances of 'str' and 'int'"
    (dict(type='BiasCorrection', steps='2'), TypeError,
     "BiasCorrection: steps must be an integer (or None), got '2' (str)"),
    (dict(type='BiasCorrection', steps=0), ValueError,
     'BiasCorrection: steps must be at least 1, got 0'),
    (dict(type='ActivationScaleSearch', steps=2.0), TypeError,
     'ActivationScaleSearch: steps must be an integer (or None), got 2.0 (float)'),
    (dict(type='LayerwiseEqualization', iterations='3'), TypeError,
     "LayerwiseEqualization: iterations must be an integer (rounds at most), got '3' (str)"),
    (dict(type='LayerwiseEqualization', max_factor='100'), TypeError,
     "LayerwiseEqualization: max_factor must be a number, got '100' (str)"),
    # a negative tolerance was accepted: every run went to the last round
    (dict(type='LayerwiseEqualization', tolerance=-1), ValueError,
     'LayerwiseEqualization: tolerance must be >= 0 and max_factor > 1, got -1.0 and 100.0'),
])
def test_ptq_passes_check_their_options_by_name(options, error, message):
    with pytest.raises(error) as raised:
        PTQ_PASSES.build(dict(options))
    assert raised.value.args[0].startswith(message), raised.value.args[0]
    # quantize_torch_model builds the passes before exporting anything
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 1))
    with pytest.raises(error, match=re.escape('ptq_passes: ' + message)):
        quantize_torch_model(net, [torch.randn(1, 3, 4, 4)], torch.randn(1, 3, 4, 4),
                             progress=False, ptq_passes=[options])


def test_ptq_passes_take_well_formed_options():
    for options in (dict(type='AdaRound', layers=('a', 'b'), beta=[10, 1], seed=3),
                    dict(type='BiasCorrection', steps=2, layers=['a']),
                    dict(type='ActivationCentering', clips=['clip']),
                    dict(type='ActivationScaleSearch', steps=1, scales=['a:in0']),
                    dict(type='LayerwiseEqualization', iterations=2, tolerance=0, max_factor=10)):
        PTQ_PASSES.build(options)
