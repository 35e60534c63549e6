"""An ONNX model whose initializers are also graph inputs (as torch.onnx.export writes
it with ``keep_initializers_as_inputs=True``, and as models before IR version 4 must)
quantizes from a dataloader of plain tensors, as onnxruntime runs it on its data input
alone: the executor refused a lone tensor for a graph of several inputs."""
import numpy as np
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from razorlib.quantization import QuantExecutor, export_graph, quantize_onnx_model, snr_db


def _model():
    rng = np.random.default_rng(0)
    weights = {'w1': rng.standard_normal((8, 3, 3, 3)).astype(np.float32),
               'b1': rng.standard_normal(8).astype(np.float32),
               'w2': rng.standard_normal((4, 8, 1, 1)).astype(np.float32)}
    inputs = [helper.make_tensor_value_info('x', TensorProto.FLOAT, ['batch', 3, 6, 6])] + [
        helper.make_tensor_value_info(name, TensorProto.FLOAT, value.shape)
        for name, value in weights.items()]
    model = helper.make_model(helper.make_graph(
        [helper.make_node('Conv', ['x', 'w1', 'b1'], ['h'], pads=[1, 1, 1, 1]),
         helper.make_node('Relu', ['h'], ['r']),
         helper.make_node('Conv', ['r', 'w2'], ['y'])], 'initializer_inputs', inputs,
        [helper.make_tensor_value_info('y', TensorProto.FLOAT, ['batch', 4, 6, 6])],
        [numpy_helper.from_array(value, name) for name, value in weights.items()]),
        opset_imports=[helper.make_opsetid('', 13)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize('platform', ['TRT_INT8', 'ORT_INT8'])
def test_quantize_onnx_model_with_initializers_among_the_inputs(tmp_path, platform):
    model = _model()
    torch.manual_seed(0)
    batches = [torch.randn(4, 3, 6, 6) for _ in range(3)]
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=['CPUExecutionProvider'])
    fp32 = torch.from_numpy(session.run(None, {'x': batches[0].numpy()})[0])
    graph = quantize_onnx_model(model, batches, platform=platform, progress=False)
    int8 = QuantExecutor(graph)(batches[0])[0]
    assert snr_db(fp32, int8) > 30
    path = tmp_path / 'int8.onnx'
    export_graph(graph, path)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    quantized = ort.InferenceSession(str(path), options, providers=['CPUExecutionProvider'])
    assert torch.allclose(torch.from_numpy(quantized.run(None, {'x': batches[0].numpy()})[0]),
                          int8, atol=1e-5)
