"""A model in float16, bfloat16 or float64 is refused before any batch is run, by every
way into quantization (quantize_torch_model, quantize_onnx_model, quantize_graph, QAT), and
an LSQGraph converted to such a dtype refuses to run or export.  Before, TRT_INT8 exported
a QDQ model with float32 scales for float16 tensors (no onnxruntime loads it) and ORT_INT8
calibration failed with a bare "cannot be converted to c10::Half"."""
import re

import pytest
import torch
import torch.nn as nn

from razorlib.algorithms import QAT
from razorlib.ir import Operation, from_onnx, from_torch, to_onnx
from razorlib.quantization import (LSQGraph, QuantExecutor, calibrate, export_graph,
                                   prepare_graph, quantize_graph, quantize_onnx_model,
                                   quantize_torch_model)
from razorlib.quantization.export import export_qdq_onnx
from ptq_helpers import STEPS, run_onnxruntime, worst_steps

DTYPES = [torch.float16, torch.bfloat16, torch.float64]
PARAMETERS = "'input', '0.weight', '0.bias', '2.weight', '2.bias'"


def net(dtype=torch.float32):
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 4, 3)).eval().to(dtype)


def images(count=2, dtype=torch.float32, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(2, 3, 8, 8, generator=generator).to(dtype) for _ in range(count)]


def refusal(action, dtype, names=None):
    """The message; a double model is named by its input (a float32 model's float64
    parameter, a shape computation's constant, is no refusal)."""
    if names is None:
        names = "'input'" if dtype == torch.float64 else PARAMETERS
    return (f"{action}: graph 'main_graph' computes in {dtype} (inputs and parameters "
            f"{names}); razorlib quantizes float32 models only (QuantizeLinear takes its "
            "float32 scales with float32 tensors only, and int32 biases do not fit half "
            "precision): quantize model.float() with float32 example_inputs (an ONNX model "
            "exported in float32); float16 and bfloat16 calibration batches are widened to "
            "float32 exactly")


class Unread:
    """A calibration dataloader that fails the test if a batch is taken from it."""

    def __iter__(self):
        raise AssertionError('a calibration batch was read before the model was refused')


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('platform', ['TRT_INT8', 'ORT_INT8'])
@pytest.mark.parametrize('ptq_passes', [(), ['LayerwiseEqualization']])
def test_quantize_torch_model_refuses_before_reading_a_batch(dtype, platform, ptq_passes):
    example = images(1, dtype)[0]
    with pytest.raises(TypeError, match=f'^{re.escape(refusal("quantize_torch_model", dtype))}$'):
        quantize_torch_model(net(dtype), Unread(), example, platform, progress=False,
                             ptq_passes=ptq_passes)


@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16])
@pytest.mark.parametrize('platform', ['TRT_INT8', 'ORT_INT8'])
@pytest.mark.parametrize('given', [True, False])
def test_quantize_onnx_model_refuses_before_reading_a_batch(dtype, platform, given):
    """Without example_inputs too: the dtypes are the ONNX model's, the first batch (the
    example then) is not taken from a one-shot iterator first."""
    example = images(1, dtype)[0]
    model = to_onnx(from_torch(net(dtype), example))
    with pytest.raises(TypeError, match=f'^{re.escape(refusal("quantize_onnx_model", dtype))}$'):
        quantize_onnx_model(model, Unread(), example if given else None, platform,
                            progress=False)


@pytest.mark.parametrize('dtype', DTYPES)
def test_quantize_graph_refuses_and_changes_nothing(dtype):
    graph = from_torch(net(dtype), images(1, dtype)[0])
    before = [(op.name, type(op), op.platform) for op in graph.operations.values()]
    with pytest.raises(TypeError, match=f'^{re.escape(refusal("quantize_graph", dtype))}$'):
        quantize_graph(graph, 'ORT_INT8')
    assert [(op.name, type(op), op.platform) for op in graph.operations.values()] == before
    assert all(type(op) is Operation for op in graph.operations.values())


def test_a_float64_parameter_of_a_float32_model_is_no_refusal():
    graph = from_torch(net(), images(1)[0])
    graph.variables['2.bias'].value = graph.variables['2.bias'].value.double()
    quantize_graph(graph, 'TRT_INT8')  # no error


def test_a_half_parameter_alone_is_named():
    graph = from_torch(net(), images(1)[0])
    graph.variables['2.bias'].value = graph.variables['2.bias'].value.half()
    with pytest.raises(TypeError, match=re.escape(
            "graph 'main_graph' computes in torch.float16 (inputs and parameters '2.bias')")):
        quantize_graph(graph, 'TRT_INT8')


def test_the_qat_algorithm_refuses_a_half_model():
    message = refusal('quantize_torch_model', torch.float16)
    with pytest.raises(TypeError, match=f'^{re.escape(message)}$'):
        QAT(net(torch.float16), images(2, torch.float16), dict(calib_steps=2))


@pytest.mark.parametrize('platform', ['TRT_INT8', 'ORT_INT8'])
def test_the_advised_float32_model_exports_what_the_executor_computes(platform, tmp_path):
    halves = images(3, torch.float16)
    graph = quantize_torch_model(net(torch.float16).float(), halves, halves[0].float(),
                                 platform, progress=False)
    model = export_graph(graph, tmp_path / 'net.onnx', 'QDQ_ONNX')
    for x in images(2, seed=5):
        ours = QuantExecutor(graph)(x)
        assert worst_steps(graph, ours, run_onnxruntime(model, [x], optimized=False)) <= STEPS


def lsq_message(action, dtype):
    return (f'{action}: its parameters were converted to {dtype} (.half(), .bfloat16(), '
            '.double() or .to(dtype)), but it computes in float32 only, as its calibrated '
            'graph does: convert it back with .float() after .double(), or build it again '
            'from the float32 graph after a half precision one (.float() keeps its weights '
            'and scales rounded to half precision)')


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('platform', ['TRT_INT8', 'ORT_INT8'])
def test_a_converted_lsq_graph_refuses_to_run_or_export(dtype, platform):
    x = images(1)[0]
    lsq = LSQGraph(quantize_torch_model(net(), images(2), x, platform, progress=False))
    expected = lsq(x).detach()
    lsq.to(dtype)  # allowed on the graph alone (QAT refuses it: test_qat_own_loss.py)
    with pytest.raises(TypeError, match=f'^{re.escape(lsq_message("LSQGraph.forward", dtype))}$'):
        lsq(x.to(dtype))
    with pytest.raises(TypeError, match=re.escape(
            lsq_message('LSQGraph.calibrated_graph', dtype))):
        lsq.calibrated_graph()
    if dtype is torch.float64:  # float32 -> float64 -> float32 is exact
        assert torch.equal(lsq.float()(x), expected)


class CastsInForward(nn.Module):
    """A float32 model (parameters and inputs) whose forward runs a ReLU in ``dtype``."""

    def __init__(self, dtype):
        super().__init__()
        self.dtype = dtype
        self.conv, self.head = nn.Conv2d(3, 8, 3), nn.Conv2d(8, 4, 3)

    def forward(self, x):
        return self.head(torch.relu(self.conv(x).to(self.dtype)).float())


def casting_net(dtype):
    torch.manual_seed(0)
    return CastsInForward(dtype).eval()


@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16])
@pytest.mark.parametrize('platform', ['TRT_INT8', 'ORT_INT8'])
def test_a_quantized_op_on_a_tensor_cast_in_forward_is_refused(dtype, platform):
    """The aggressive dispatcher quantizes the ReLU on the cast tensor: its QDQ export gave
    a float16 QuantizeLinear a float32 scale, which onnxruntime refused to load."""
    message = (f"quantize_torch_model: graph 'main_graph' quantizes tensors of another dtype "
               f"than float32 (op 'node_relu' (Relu) on '_to_copy' {dtype}, 'relu' {dtype}): "
               'the model casts inside its forward, and QuantizeLinear takes its float32 '
               'scales with float32 tensors only, so the QDQ model would not load; keep these '
               "ops in floating point (dispatcher='conservative', or dispatching_table="
               "{'node_relu': 'FP32'}) or cast to float32 before them")
    with pytest.raises(TypeError, match=f'^{re.escape(message)}$'):
        quantize_torch_model(casting_net(dtype), images(2), images(1)[0], platform,
                             dispatcher='aggressive', progress=False)


@pytest.mark.parametrize('dispatch', [dict(dispatcher='conservative'),
                                      dict(dispatcher='aggressive',
                                           dispatching_table={'node_relu': 'FP32'})])
def test_ops_on_a_tensor_cast_in_forward_left_in_float_export_what_the_executor_computes(
        dispatch, tmp_path):
    """What the refusal advises: the cast tensors stay in floating point, the QDQ model
    loads and computes the executor's output."""
    graph = quantize_torch_model(casting_net(torch.float16), images(3), images(1)[0],
                                 'TRT_INT8', progress=False, **dispatch)
    assert not graph.operations['node_relu'].platform.name.endswith('INT8')
    assert graph.operations['node_conv2d'].platform.name == 'TRT_INT8'
    model = export_graph(graph, tmp_path / 'net.onnx', 'QDQ_ONNX')
    for x in images(2, seed=5):
        ours = QuantExecutor(graph)(x)
        assert worst_steps(graph, ours, run_onnxruntime(model, [x], optimized=False)) <= STEPS


@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16])
@pytest.mark.parametrize('platform', ['TRT_INT8', 'ORT_INT8'])
@pytest.mark.parametrize('export', [export_qdq_onnx, export_graph])
def test_the_graph_level_path_refuses_to_export_a_tensor_cast_in_forward(
        dtype, platform, export, tmp_path):
    """prepare_graph, quantize_graph(aggressive), calibrate: calibration and the executor
    run, but the QDQ export wrote a file onnxruntime refused to load ("QuantizeLinear bound
    to different types (tensor(float16) and tensor(float))"); it is refused, nothing written."""
    x = images(1)[0]
    graph = prepare_graph(from_torch(casting_net(dtype), x), x)
    graph = calibrate(quantize_graph(graph, platform, 'aggressive'), images(2), progress=False)
    assert graph.operations['node_relu'].platform.name == platform
    assert QuantExecutor(graph)(x)[0].shape == (2, 4, 4, 4)  # calibrated, it runs
    message = (f"export_qdq_onnx: graph 'main_graph' quantizes tensors of another dtype than "
               f"float32 (op 'node_relu' (Relu) on '_to_copy' {dtype}, 'relu' {dtype}): the "
               'model casts inside its forward, and QuantizeLinear takes its float32 scales '
               'with float32 tensors only, so the QDQ model would not load; keep these ops in '
               "floating point (dispatcher='conservative', or dispatching_table="
               "{'node_relu': 'FP32'}) or cast to float32 before them")
    with pytest.raises(TypeError, match=f'^{re.escape(message)}$'):
        export(graph, tmp_path / 'net.onnx')
    assert list(tmp_path.iterdir()) == []


def test_the_graph_level_path_refuses_before_calibration_is_asked_for(tmp_path):
    """An uncalibrated graph is told about its dtypes first: calibrating it would not make
    it exportable."""
    x = images(1)[0]
    graph = quantize_graph(prepare_graph(from_torch(casting_net(torch.float16), x), x),
                           'TRT_INT8', 'aggressive')
    with pytest.raises(TypeError, match='^export_qdq_onnx: .* quantizes tensors of another'):
        export_qdq_onnx(graph, tmp_path / 'net.onnx')
    assert list(tmp_path.iterdir()) == []


def test_the_graph_level_path_exports_a_tensor_cast_in_forward_kept_in_float(tmp_path):
    """The refusal's advice on the graph-level path: the QDQ model loads and computes the
    executor's output."""
    x = images(1)[0]
    graph = prepare_graph(from_torch(casting_net(torch.float16), x), x)
    graph = calibrate(quantize_graph(graph, 'TRT_INT8', 'aggressive', {'node_relu': 'FP32'}),
                      images(3), progress=False)
    model = export_qdq_onnx(graph, tmp_path / 'net.onnx')
    for x in images(2, seed=5):
        ours = QuantExecutor(graph)(x)
        assert worst_steps(graph, ours, run_onnxruntime(model, [x], optimized=False)) <= STEPS


def test_calibration_records_the_dtypes_the_export_checks(tmp_path):
    """An ONNX model without value_info quantized without prepare_graph has no dtypes
    recorded: its export wrote a model onnxruntime refused.  Calibration records the dtypes
    of the tensors it observes (only where none is), so the export refuses it."""
    x = images(1)[0]
    model = to_onnx(from_torch(casting_net(torch.float16), x))
    del model.graph.value_info[:]
    graph = quantize_graph(from_onnx(model), 'TRT_INT8', 'aggressive')
    assert graph.variables['_to_copy'].dtype is None
    calibrate(graph, images(2), progress=False)
    assert [graph.variables[name].dtype for name in ('conv2d', '_to_copy', 'relu')] == [
        torch.float32, torch.float16, torch.float16]
    with pytest.raises(TypeError, match=re.escape(
            "export_qdq_onnx: graph 'main_graph' quantizes tensors of another dtype than "
            "float32 (op 'node_relu' (Relu) on '_to_copy' torch.float16, 'relu' "
            'torch.float16)')):
        export_qdq_onnx(graph, tmp_path / 'net.onnx')
    assert list(tmp_path.iterdir()) == []
