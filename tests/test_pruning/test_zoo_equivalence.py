"""Acceptance on the test zoo: masked supernet == deployed slim model, and the slim model
traces again and exports to ONNX that onnxruntime runs to the same outputs."""
import copy

import numpy as np
import onnxruntime as ort
import pytest
import torch

from razorlib.pruning import L1NormPruner
from razorlib.tracing import build_groups, trace
from zoo import ZOO, flatten_outputs, run_model, tiered


def _param_count(model):
    return sum(p.numel() for p in model.parameters())


@pytest.fixture(scope='module', params=[tiered(name) for name in sorted(ZOO)])
def pruned(request):
    entry = ZOO[request.param]
    torch.manual_seed(0)
    model = entry.build().eval()
    inputs = entry.example_inputs()
    with torch.no_grad():
        dense_out = flatten_outputs(run_model(model, inputs))
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, inputs)
    pruner.set_subnet(pruner.sample_subnet())
    with torch.no_grad():
        masked_out = flatten_outputs(run_model(model, inputs))
    slim = pruner.deploy_subnet(copy.deepcopy(model), pruner.export_subnet())
    with torch.no_grad():
        slim_out = flatten_outputs(run_model(slim, inputs))
    return dict(name=request.param, model=model, slim=slim, inputs=inputs, dense=dense_out,
                masked=masked_out, out=slim_out, pruner=pruner)


def test_masked_equals_slim(pruned):
    for masked, slim in zip(pruned['masked'], pruned['out']):
        scale = masked.abs().max().clamp_min(1e-6)
        assert (masked - slim).abs().max() <= 1e-4 * scale


def test_output_shapes_unchanged_and_fewer_parameters(pruned):
    assert [t.shape for t in pruned['out']] == [t.shape for t in pruned['dense']]
    assert _param_count(pruned['slim']) < _param_count(pruned['model'])
    assert pruned['pruner'].groups.prunable


def test_slim_model_traces_again(pruned):
    groups = build_groups(trace(pruned['slim'], pruned['inputs']))
    assert len(groups.prunable) == len(pruned['pruner'].groups.prunable)


def test_slim_model_exports_to_onnx(pruned, tmp_path):
    inputs = pruned['inputs']
    args = inputs if isinstance(inputs, tuple) else (inputs, )
    path = tmp_path / f"{pruned['name']}.onnx"
    torch.onnx.export(pruned['slim'], args, str(path), dynamo=True)
    session = ort.InferenceSession(str(path), providers=['CPUExecutionProvider'])
    feeds = {i.name: a.numpy() for i, a in zip(session.get_inputs(), args)}
    outputs = session.run(None, feeds)
    for expected, got in zip(pruned['out'], outputs):
        np.testing.assert_allclose(got, expected.numpy(), rtol=1e-4, atol=1e-4)
