"""analyse_error: per-layer and whole-graph SNR, and the table sorted by error."""
import math

import pytest
import torch

from razorlib.ir import TorchExecutor
from razorlib.quantization import (LayerError, QuantErrorReport, QuantExecutor, SNRMeter,
                                   analyse_error, bake_parameters, quantable_operations,
                                   snr_db)
from ptq_helpers import batches, calibrated, float_graph


def test_snr_by_hand():
    # signal 1 + 4 + 4 = 9, noise 0.01 + 0.04 = 0.05
    assert snr_db(torch.tensor([1.0, 2.0, -2.0]), torch.tensor([1.1, 2.2, -2.0])) == \
        pytest.approx(10 * math.log10(9 / 0.05))
    assert snr_db(torch.ones(3), torch.ones(3)) == math.inf
    assert snr_db(torch.zeros(3), torch.ones(3)) == -math.inf


def test_meter_sums_powers_over_batches():
    meter = SNRMeter()
    meter.update(torch.tensor([3.0]), torch.tensor([3.0]))
    meter.update(torch.tensor([4.0]), torch.tensor([3.0]))
    assert (meter.signal, meter.noise) == (25.0, 1.0)
    assert meter.db == pytest.approx(10 * math.log10(25.0))


def test_table_is_sorted_worst_first():
    report = QuantErrorReport([LayerError('a', 'Conv', 30.0, 20.0),
                               LayerError('b', 'Relu', 40.0, 10.0),
                               LayerError('c', 'Gemm', 20.0, 30.0)], {'y': 12.5})
    assert [row.name for row in report.sorted_layers('layer')] == ['c', 'a', 'b']
    assert [row.name for row in report.sorted_layers('graph')] == ['b', 'a', 'c']
    lines = report.table(by='graph', top=2).splitlines()
    assert lines[0].split() == ['layer', 'type', 'layer', 'SNR', 'dB', 'graph', 'SNR', 'dB']
    assert [line.split()[0] for line in lines[1:3]] == ['b', 'a']
    assert lines[-1] == "graph output 'y': 12.5 dB" and len(lines) == 4
    with pytest.raises(ValueError, match='by must be one of'):
        report.sorted_layers('size')


@pytest.fixture(scope='module')
def analysed():
    graph = calibrated(float_graph(), 'ORT_INT8')
    data = batches(3, seed=7)
    states = [config.state for op in quantable_operations(graph)
              for config, _ in op.config_with_variable]
    return graph, data, analyse_error(graph, data), states


def test_one_row_per_quantable_operation_in_order(analysed):
    graph, _, report, _ = analysed
    assert [row.name for row in report.layers] == [op.name for op in quantable_operations(graph)]
    assert all(math.isfinite(row.layer_snr_db) and math.isfinite(row.graph_snr_db)
               for row in report.layers)
    first = report.layers[0]  # nothing upstream: its accumulated error is its own
    assert first.graph_snr_db == pytest.approx(first.layer_snr_db)


def test_output_snr_is_that_of_the_quantized_graph(analysed):
    graph, data, report, _ = analysed
    fp32 = TorchExecutor(float_graph())
    quantized = QuantExecutor(graph)
    meter = SNRMeter()
    for x in data:
        meter.update(fp32(x)[0], quantized(x)[0])
    name, = graph.outputs
    assert report.outputs[name] == pytest.approx(meter.db)
    assert 10 < meter.db < 60


def test_the_graph_is_left_as_it_was(analysed):
    graph, _, _, states = analysed
    assert not any(op.is_dequantized for op in quantable_operations(graph))
    assert states == [config.state for op in quantable_operations(graph)
                      for config, _ in op.config_with_variable]


def test_a_dequantized_operation_adds_no_error():
    graph = calibrated(float_graph())
    last = quantable_operations(graph)[-1]
    last.dequantize()
    row = analyse_error(graph, batches(1)).layers[-1]
    assert row.name == last.name and row.layer_snr_db == math.inf
    assert last.is_dequantized


@pytest.mark.parametrize('platform', ['TRT_INT8', 'ORT_INT8'])
def test_a_baked_weight_keeps_its_error_in_the_layer_snr(platform):
    # one conv: its layer SNR is the graph's, before and after its weight is baked
    torch.manual_seed(0)
    net = torch.nn.Conv2d(3, 8, 3)
    with torch.no_grad():
        net.weight[:, 0, 0, 0] = 30.0  # a coarse weight grid: the weights' error counts
    data = batches(2)
    graph = calibrated(float_graph(net, data[0]), platform, data=data)
    before = analyse_error(graph, data).layers[0]
    bake_parameters(graph)
    after = analyse_error(graph, data).layers[0]
    assert before.layer_snr_db == pytest.approx(before.graph_snr_db)
    assert after.layer_snr_db == pytest.approx(before.layer_snr_db)
    assert after.graph_snr_db == pytest.approx(before.graph_snr_db)
