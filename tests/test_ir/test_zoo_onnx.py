"""Acceptance on the test zoo and its slimmed subnets: from_torch -> TorchExecutor equals the
torch model, to_onnx -> onnxruntime equals it too, and from_onnx(to_onnx(g)) is g."""
import onnx
import onnxruntime as ort
import pytest
import torch
from torch.utils._pytree import tree_leaves

import razorlib
from razorlib.ir import TorchExecutor, from_onnx, from_torch, structural_differences, to_onnx
from zoo import ZOO, run_model, tiered

RTOL = 1e-5  # of the largest magnitude of each output


def _flat_inputs(inputs):
    """Graph input order: positional arguments, or keyword arguments in the given order."""
    return list(inputs.values()) if isinstance(inputs, dict) else tree_leaves(inputs)


def _assert_close(got, expected):
    assert len(got) == len(expected)
    for tensor, reference in zip(got, expected):
        assert tensor.shape == reference.shape and tensor.dtype == reference.dtype
        scale = reference.abs().max().clamp_min(1e-6)
        assert (tensor - reference).abs().max() <= RTOL * scale


@pytest.fixture(scope='module', params=[tiered(name, (name, variant)) for name in sorted(ZOO)
                                        for variant in ('dense', 'slim')],
                ids=lambda param: '-'.join(param))
def exported(request):
    name, variant = request.param
    entry = ZOO[name]
    torch.manual_seed(0)
    model = entry.build().eval()
    inputs = entry.example_inputs()
    if variant == 'slim':
        model = razorlib.prune(model, inputs, ratio=0.5).eval()
    with torch.no_grad():
        expected = tree_leaves(run_model(model, inputs))  # the exporter's output order
    graph = from_torch(model, inputs)
    return dict(graph=graph, inputs=_flat_inputs(inputs), expected=expected)


def test_exported_with_the_dynamo_exporter(exported):
    assert exported['graph'].extension_attrib['exporter'] == 'dynamo'


def test_executor_matches_torch(exported):
    _assert_close(TorchExecutor(exported['graph'])(exported['inputs']), exported['expected'])


def test_onnxruntime_matches_torch(exported):
    model = to_onnx(exported['graph'])
    onnx.checker.check_model(model)
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=['CPUExecutionProvider'])
    feeds = {item.name: tensor.numpy()
             for item, tensor in zip(session.get_inputs(), exported['inputs'])}
    outputs = [torch.from_numpy(array) for array in session.run(None, feeds)]
    _assert_close(outputs, exported['expected'])


def test_onnx_round_trip_is_structurally_identical(exported):
    graph = exported['graph']
    assert structural_differences(from_onnx(to_onnx(graph)), graph) == []
