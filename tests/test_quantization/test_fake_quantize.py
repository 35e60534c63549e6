"""fake_quantize: the config's arithmetic, by hand and bit for bit against onnxruntime's Q/DQ."""
import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from razorlib.ir import QuantizationProperty as P
from razorlib.ir import TensorQuantizationConfig
from razorlib.quantization import config_scale_offset, fake_quantize, quantize_integers
from ptq_helpers import run_onnxruntime

PER_CHANNEL = P.PER_CHANNEL | P.LINEAR | P.SYMMETRICAL
ASYMMETRIC = P.PER_TENSOR | P.LINEAR | P.ASYMMETRICAL


def test_per_tensor_by_hand():
    config = TensorQuantizationConfig(scale=torch.tensor(0.5), offset=torch.tensor(0.0))
    x = torch.tensor([0.24, 0.25, 0.75, -0.75, 100.0, -100.0])
    # 0.25 / 0.5 = 0.5 and 0.75 / 0.5 = 1.5 round half to even: 0 and 2.
    assert quantize_integers(x, config).tolist() == [0, 0, 2, -2, 127, -128]
    assert fake_quantize(x, config).tolist() == [0.0, 0.0, 1.0, -1.0, 63.5, -64.0]


def test_asymmetric_by_hand():
    config = TensorQuantizationConfig(ASYMMETRIC, quant_min=0, quant_max=255,
                                      scale=torch.tensor(0.1), offset=torch.tensor(10.0))
    x = torch.tensor([-1.0, -2.0, 0.0, 30.0])
    assert quantize_integers(x, config).tolist() == [0, 0, 10, 255]
    assert torch.allclose(fake_quantize(x, config), torch.tensor([-1.0, -1.0, 0.0, 24.5]))


def test_per_channel_lays_the_scales_along_the_channel_axis():
    config = TensorQuantizationConfig(PER_CHANNEL, channel_axis=1, quant_min=-127,
                                      scale=torch.tensor([1.0, 0.1]), offset=torch.zeros(2))
    x = torch.tensor([[[0.26], [0.26]], [[300.0], [-300.0]]])  # (2, 2, 1): axis 1 = channels
    assert config_scale_offset(config, x)[0].shape == (1, 2, 1)
    assert torch.allclose(fake_quantize(x, config).flatten(),
                          torch.tensor([0.0, 0.3, 127.0, -12.7]))


def test_an_uncalibrated_config_is_refused():
    with pytest.raises(ValueError, match='calibrate it first'):
        fake_quantize(torch.ones(2), TensorQuantizationConfig())


def _qdq_model(scale, zero_point, axis, shape):
    initializers = [numpy_helper.from_array(scale, 'scale'),
                    numpy_helper.from_array(zero_point, 'zero_point')]
    attributes = {} if axis is None else {'axis': axis}
    nodes = [helper.make_node('QuantizeLinear', ['x', 'scale', 'zero_point'], ['q'], **attributes),
             helper.make_node('DequantizeLinear', ['q', 'scale', 'zero_point'], ['y'],
                              **attributes)]
    graph = helper.make_graph(
        nodes, 'qdq', [helper.make_tensor_value_info('x', TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info('y', TensorProto.FLOAT, shape)], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 13)], ir_version=8)
    onnx.checker.check_model(model)
    return model


@pytest.mark.parametrize('kind', ['int8', 'uint8', 'per_channel'])
def test_bit_for_bit_with_onnxruntime_quantize_dequantize(kind):
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(4, 3, 5, 5, generator=generator) * 3
    x.view(-1)[:50] = (torch.arange(50) - 25 + 0.5) * 0.02  # exact halves of the step
    if kind == 'per_channel':
        scale = torch.tensor([0.02, 0.05, 0.013])
        config = TensorQuantizationConfig(PER_CHANNEL, channel_axis=1, scale=scale,
                                          offset=torch.zeros(3))
        zero_point, axis = np.zeros(3, np.int8), 1
    elif kind == 'uint8':
        config = TensorQuantizationConfig(ASYMMETRIC, quant_min=0, quant_max=255,
                                          scale=torch.tensor(0.02), offset=torch.tensor(128.0))
        zero_point, axis = np.array(128, np.uint8), None
    else:
        config = TensorQuantizationConfig(scale=torch.tensor(0.02), offset=torch.tensor(0.0))
        zero_point, axis = np.array(0, np.int8), None
    model = _qdq_model(config.scale.numpy(), zero_point, axis, list(x.shape))
    expected, = run_onnxruntime(model, [x], optimized=False)
    assert torch.equal(fake_quantize(x, config), expected)
