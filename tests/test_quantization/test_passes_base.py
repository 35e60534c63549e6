"""What every PTQ pass checks before it runs (passes/base.py): a calibrated pass refuses a
graph quantized but never calibrated, naming the pass, and warns about a partly
calibrated one; it runs on a calibrated graph without a word."""
import warnings

import pytest
import torch

from razorlib.ir import from_torch
from razorlib.quantization import build_ptq_pass, calibrate, prepare_graph, quantize_graph

CALIBRATED_PASSES = ['BiasCorrection', dict(type='AdaRound', steps=5), 'ActivationCentering',
                     dict(type='ActivationScaleSearch', spans=(2.0, ), points=3),
                     dict(type='MixedPrecision', target_snr_db=30)]


def quantized_graph():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                              torch.nn.Conv2d(8, 4, 3, padding=1)).eval()
    batches = [torch.randn(4, 3, 8, 8) for _ in range(2)]
    return quantize_graph(prepare_graph(from_torch(net, batches[0]), batches[0]),
                          'TRT_INT8'), batches


@pytest.mark.parametrize('spec', CALIBRATED_PASSES, ids=str)
def test_a_calibrated_pass_refuses_a_graph_never_calibrated(spec):
    graph, batches = quantized_graph()
    pass_ = build_ptq_pass(spec)
    with pytest.raises(ValueError, match=rf'PTQ pass {pass_!r}: 6 of the 6 quantization '
                       r'configs .* are uncalibrated .*call calibrate\(\) first'):
        pass_(graph, batches)
    calibrate(graph, batches, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        pass_(graph, batches)


def test_a_partly_calibrated_graph_gets_a_warning_naming_the_pass():
    graph, batches = quantized_graph()
    calibrate(graph, batches, progress=False)
    op = next(op for op in graph.topological_sort() if op.type == 'Conv')
    op.input_quant_config[0].dominated_by.state = type(op.input_quant_config[0].state).INITIAL
    with pytest.warns(UserWarning, match=r'PTQ pass BiasCorrection: 1 of the \d+ '):
        build_ptq_pass('BiasCorrection')(graph, batches)
