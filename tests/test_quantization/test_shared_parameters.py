"""A parameter several quantized operations read (a module called twice, quantized with
``passes=()``, without ``FormatParameter``) is split by ``quantize_graph``: each reader
keeps its fp32 value aside for itself, so baking, ``dequantize_graph``, AdaRound and
BiasCorrection change one reader's value without changing the other's or the FP32
reference."""
import os

import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as F

from razorlib.ir import TorchExecutor, from_torch
from razorlib.quantization import (QuantExecutor, bake_parameters, dequantize_graph,
                                   dequantized, export_graph, quantize_graph,
                                   quantize_torch_model, restore_quantize_state)


class _Twice(torch.nn.Module):
    """One conv called twice: its weight and bias are read by two operations."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 8, 1)
        self.conv = torch.nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x):
        return self.conv(F.relu(self.conv(F.relu(self.stem(x)))))


def _model_and_batches():
    torch.manual_seed(0)
    return _Twice().eval(), [torch.randn(4, 3, 6, 6) for _ in range(4)]


def _shared(graph):
    return sorted(var.name for var in graph.variables.values()
                  if var.is_parameter and len(set(var.dest_ops)) > 1)


def test_quantize_graph_splits_parameters_quantized_operations_share():
    net, batches = _model_and_batches()
    graph = from_torch(net, batches[0])
    assert _shared(graph) == ['conv.bias', 'conv.weight']
    reference = TorchExecutor(graph)(batches[0])[0]
    graph = quantize_graph(graph, 'TRT_INT8')
    assert _shared(graph) == []
    with dequantized(graph):
        assert torch.equal(QuantExecutor(graph)(batches[0])[0], reference)


@pytest.mark.parametrize('platform', ['TRT_INT8', 'ORT_INT8'])
def test_bake_dequantize_restore_round_trip_with_a_module_called_twice(platform):
    net, batches = _model_and_batches()
    with torch.no_grad():
        fp32 = net(batches[0])
    graph = quantize_torch_model(net, batches, batches[0], platform, calib_steps=4,
                                 dispatcher='aggressive', progress=False, passes=())
    executor = QuantExecutor(graph)
    int8 = executor(batches[0])[0]
    bake_parameters(graph)
    assert torch.equal(executor(batches[0])[0], int8)
    dequantize_graph(graph)
    # the shared bias was parked by each reader in turn: the FP32 reference came back
    # 1.8e-3 off, and restoring gave 6.3e-3 off the quantized output
    assert torch.allclose(executor(batches[0])[0], fp32, atol=1e-6)
    restore_quantize_state(graph)
    assert torch.equal(executor(batches[0])[0], int8)


@pytest.mark.parametrize('platform', ['TRT_INT8', 'ORT_INT8'])
@pytest.mark.parametrize('ptq_pass', ['BiasCorrection', dict(type='AdaRound', steps=20)])
def test_ptq_passes_on_shared_parameters_keep_the_reference_and_the_export(
        tmp_path, platform, ptq_pass):
    net, batches = _model_and_batches()
    with torch.no_grad():
        fp32 = net(batches[0])
    outputs = []
    for passes in ((), ('FormatParameter', )):  # shared as exported, split by the pass
        graph = quantize_torch_model(net, batches, batches[0], platform, calib_steps=4,
                                     dispatcher='aggressive', progress=False,
                                     passes=passes, ptq_passes=[ptq_pass])
        executor = QuantExecutor(graph)
        outputs.append(executor(batches[0])[0])
        with dequantized(graph):  # BiasCorrection moved it by 7.6e-4
            assert torch.allclose(executor(batches[0])[0], fp32, atol=1e-6)
        path = os.path.join(tmp_path, f'{len(outputs)}.onnx')
        export_graph(graph, path)
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        session = ort.InferenceSession(path, options, providers=['CPUExecutionProvider'])
        onnxruntime_output = torch.from_numpy(session.run(
            None, {session.get_inputs()[0].name: batches[0].numpy()})[0])
        # the export and the simulation were 3e-3 apart (a step is about 1e-2)
        assert torch.allclose(onnxruntime_output, outputs[-1], atol=1e-5)
    # each reader got its own correction or rounding, as after FormatParameter
    assert torch.allclose(outputs[0], outputs[1], atol=1e-6)
