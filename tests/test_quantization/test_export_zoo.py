"""Acceptance on the test zoo and its slimmed subnets: quantized with random calibration
data and exported as QDQ ONNX, the model passes onnx.checker and onnxruntime's output
agrees with the executor's fake-quant output within 2 quantization steps of each output
(its scale when quantized, else that of an int8 quantization of the reference output)."""
import onnx
import pytest
import torch
from torch.utils._pytree import tree_leaves

import razorlib
from razorlib.ir import TorchExecutor, from_torch
from razorlib.quantization import QuantExecutor, calibrate, export_graph, quantize_graph
from ptq_helpers import ORT_OPTIMIZED_INEXACT, STEPS, run_onnxruntime, worst_steps
from zoo import ZOO, tiered


def _flat_inputs(inputs):
    return list(inputs.values()) if isinstance(inputs, dict) else tree_leaves(inputs)


@pytest.fixture(scope='module', params=[tiered(name, (name, variant)) for name in sorted(ZOO)
                                        for variant in ('dense', 'slim')],
                ids=lambda param: '-'.join(param))
def exported(request):
    name, variant = request.param
    torch.manual_seed(0)
    model = ZOO[name].build().eval()
    inputs = ZOO[name].example_inputs()
    if variant == 'slim':
        model = razorlib.prune(model, inputs, ratio=0.5).eval()
    graph = from_torch(model, inputs)
    flat = _flat_inputs(inputs)
    TorchExecutor(graph).tracing_operation_meta(flat)
    generator = torch.Generator().manual_seed(1)
    data = [[torch.randn(x.shape, generator=generator) for x in flat] for _ in range(4)]
    return graph, data[:3], data[3]


@pytest.mark.parametrize('platform', ['TRT_INT8', 'ORT_INT8'])
def test_onnxruntime_runs_the_qdq_model_as_the_executor(exported, platform, tmp_path):
    float_graph, calibration, test_inputs = exported
    graph = quantize_graph(float_graph.copy(), platform)
    calibrate(graph, calibration, progress=False)
    model = export_graph(graph, tmp_path / 'model.onnx')
    onnx.checker.check_model(model)
    ours = QuantExecutor(graph)(test_inputs)
    for optimized in (False, True):
        if optimized and ORT_OPTIMIZED_INEXACT:
            pytest.skip(f'unoptimized session agrees; optimized not checked: '
                        f'{ORT_OPTIMIZED_INEXACT}')
        theirs = run_onnxruntime(model, test_inputs, optimized)
        assert worst_steps(graph, ours, theirs) <= STEPS, f'optimized={optimized}'
