"""Misuse that used to give silent nonsense: an uncalibrated graph analysed, exported or
trained; analyse_error without batches; snr_db of tensors of different shapes."""
import pytest
import torch

from razorlib.ir import from_torch
from razorlib.quantization import (LSQGraph, analyse_error, export_graph, quantize_graph,
                                   quantize_torch_model, snr_db)
from razorlib.quantization.state import check_calibrated, uncalibrated_configs

UNCALIBRATED = (r'\d+ of the \d+ quantization configs .* are uncalibrated .* '
                r'call calibrate\(\) first')


def net_and_data():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                              torch.nn.Linear(8 * 36, 4)).eval()
    return net, [torch.randn(4, 3, 8, 8) for _ in range(2)]


def uncalibrated():
    net, data = net_and_data()
    return quantize_graph(from_torch(net, data[0]), 'TRT_INT8'), data


def test_the_shared_check_counts_the_initial_configs():
    graph, _ = uncalibrated()
    count, total = uncalibrated_configs(graph)
    assert count == total == 3  # conv input, conv weight, relu output
    with pytest.raises(ValueError, match=f'^export: {count} of the {total} quantization'):
        check_calibrated(graph, 'export', error=True)
    with pytest.warns(UserWarning, match=UNCALIBRATED):
        check_calibrated(graph, 'analyse_error')


def test_analyse_error_warns_on_an_uncalibrated_graph():
    graph, data = uncalibrated()
    with pytest.warns(UserWarning, match='analyse_error: ' + UNCALIBRATED):
        analyse_error(graph, data, steps=1)


@pytest.mark.parametrize('export_format', ['QDQ_ONNX', 'TRT_JSON'])
def test_export_refuses_an_uncalibrated_graph(export_format, tmp_path):
    graph, _ = uncalibrated()
    with pytest.raises(ValueError, match=UNCALIBRATED):
        export_graph(graph, tmp_path / 'net.onnx', export_format)
    assert not list(tmp_path.iterdir())
    export_graph(graph, tmp_path / 'net.onnx', 'ONNX')  # the FP32 model needs no ranges


def test_lsq_warns_on_an_uncalibrated_graph():
    graph, _ = uncalibrated()
    with pytest.warns(UserWarning, match='LSQGraph: ' + UNCALIBRATED):
        LSQGraph(graph)


def test_a_calibrated_graph_passes_silently(recwarn):
    net, data = net_and_data()
    graph = quantize_torch_model(net, data, data[0], progress=False)
    assert uncalibrated_configs(graph)[0] == 0
    analyse_error(graph, data, steps=1)
    assert not [w for w in recwarn if 'uncalibrated' in str(w.message)]


def test_analyse_error_without_batches_names_the_dataloader():
    net, data = net_and_data()
    graph = quantize_torch_model(net, data, data[0], progress=False)
    with pytest.raises(ValueError, match='analyse_error: dataloader gave no batch'):
        analyse_error(graph, [], steps=2)


def test_snr_of_different_shapes_names_both():
    with pytest.raises(ValueError, match=r'reference \(3, 1\), tensor \(3,\)'):
        snr_db(torch.zeros(3, 1), torch.ones(3))
    assert snr_db(torch.ones(3, 1), torch.ones(3, 1)) == float('inf')
