"""QuantExecutor on a graph never calibrated: it runs in floating point, so its first run
warns (once per executor); calibration, which runs the uncalibrated graph on purpose, and
analyse_error, which warns itself, do not make it warn."""
import warnings

import pytest
import torch

from razorlib.quantization import QuantExecutor, analyse_error, calibrate, quantize_graph
from razorlib.quantization.state import uncalibrated_configs, uncalibrated_operations
from ptq_helpers import batches, float_graph
from quant_graphs import GraphBuilder

WARNING = (r"^QuantExecutor: 3 of the 3 quantization configs of graph 'conv_relu' are "
           r"uncalibrated \(INITIAL, no scale; ops 'conv', 'relu'\), so their tensors would "
           r"stay in floating point; call calibrate\(\) first \(quantize_torch_model and "
           r"quantize_onnx_model calibrate\)$")


def conv_relu():
    """A Conv-Relu graph quantized for TRT_INT8, not calibrated (3 INITIAL configs)."""
    b = GraphBuilder('conv_relu')
    torch.manual_seed(0)
    b.param('w', torch.randn(4, 3, 3, 3))
    b.op('Conv', 'conv', ['x', 'w'])
    b.op('Relu', 'relu', ['conv'])
    return quantize_graph(b.output('relu'), 'TRT_INT8')


def test_an_uncalibrated_run_warns_once_per_executor_naming_configs_and_ops():
    graph, x = conv_relu(), batches(1)[0]
    executor = QuantExecutor(graph)
    with pytest.warns(UserWarning, match=WARNING) as caught:
        first = executor(x)[0]
    assert len(caught) == 1 and caught[0].filename == __file__  # points at the caller
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        assert torch.equal(executor(x)[0], first)  # warned once: the next run is silent
    with pytest.warns(UserWarning, match=WARNING):
        QuantExecutor(graph)(x)  # a new executor warns again


def test_the_warning_names_the_first_five_operations():
    graph = quantize_graph(float_graph(), 'TRT_INT8', 'aggressive')
    count, total = uncalibrated_configs(graph)
    names = uncalibrated_operations(graph)
    assert len(names) > 5
    listed = ', '.join(repr(name) for name in names[:5])
    with pytest.warns(UserWarning, match=rf'^QuantExecutor: {count} of the {total} .*; ops '
                                         rf'{listed}, \.\.\.\), so'):
        QuantExecutor(graph)(batches(1)[0])


def test_calibration_runs_the_uncalibrated_graph_without_warning():
    graph, data = conv_relu(), batches(2)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        calibrate(graph, data, progress=False)
        QuantExecutor(graph)(data[0])
    assert uncalibrated_configs(graph)[0] == 0


def test_an_executor_built_before_calibration_is_silent_after_it():
    graph, data = conv_relu(), batches(2)
    executor = QuantExecutor(graph)
    calibrate(graph, data, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        executor(data[0])


def test_warn_uncalibrated_false_runs_silently_in_floating_point():
    graph, x = conv_relu(), batches(1)[0]
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        quiet = QuantExecutor(graph, warn_uncalibrated=False)(x)[0]
    weight = graph.operations['conv'].inputs[1].value
    assert torch.equal(quiet, torch.relu(torch.nn.functional.conv2d(x, weight)))


def test_analyse_error_warns_once_not_twice():
    graph, data = conv_relu(), batches(1)
    with pytest.warns(UserWarning) as caught:
        analyse_error(graph, data, steps=1)
    messages = [str(w.message) for w in caught if 'uncalibrated' in str(w.message)]
    assert len(messages) == 1 and messages[0].startswith('analyse_error: 3 of the 3')
