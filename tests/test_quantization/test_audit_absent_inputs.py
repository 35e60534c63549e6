"""An absent optional input (ONNX's empty name: ``Conv(x, w, '')``) has no tensor: the
quantizers give it an FP32 config, so calibration and export pass it by."""
import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from razorlib.ir import EMPTY_NAME, QuantizationStates, from_onnx
from razorlib.quantization import QuantExecutor, calibrate, export_graph, quantize_graph
from ptq_helpers import run_onnxruntime


def conv_without_bias():
    weight = np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node('Conv', ['x', 'w', ''], ['y'], name='conv'),
         helper.make_node('Relu', ['y'], ['z'], name='relu')], 'absent',
        [helper.make_tensor_value_info('x', TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info('z', TensorProto.FLOAT, [1, 4, 6, 6])],
        initializer=[numpy_helper.from_array(weight, 'w')])
    return from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid('', 13)]))


@pytest.mark.parametrize('platform', ['TRT_INT8', 'ORT_INT8'])
def test_an_absent_bias_stays_fp32_and_the_model_calibrates_and_exports(platform, tmp_path):
    # the absent bias got an INITIAL activation config: calibration observed None and failed
    graph = quantize_graph(conv_without_bias(), platform)
    conv = graph.operations['conv']
    assert conv.inputs[2].name == EMPTY_NAME
    assert conv.input_quant_config[2].state is QuantizationStates.FP32
    calibrate(graph, [torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(1))],
              progress=False)
    model = export_graph(graph, tmp_path / 'model.onnx')
    onnx.checker.check_model(model)
    x = torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(2))
    assert torch.equal(run_onnxruntime(model, [x], False)[0], QuantExecutor(graph)([x])[0])
