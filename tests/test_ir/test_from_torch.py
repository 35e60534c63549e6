"""from_torch: which exporter, its fallback, the model's mode, keyword inputs."""
import logging

import pytest
import torch

from razorlib.ir import TorchExecutor, from_torch
from razorlib.ir.torch_export import EXPORTERS


class ConvBN(torch.nn.Module):

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.bn = torch.nn.BatchNorm2d(4)

    def forward(self, x, scale):
        return torch.relu(self.bn(self.conv(x))) * scale


def _model_and_inputs():
    torch.manual_seed(0)
    model = ConvBN()
    with torch.no_grad():
        model.bn.running_mean.normal_()
        model.bn.running_var.uniform_(0.5, 1.5)
    return model, {'x': torch.randn(2, 3, 6, 6), 'scale': torch.tensor(3.0)}


@pytest.mark.parametrize('exporter', ['dynamo', 'torchscript'])
def test_exports_in_eval_mode_with_keyword_inputs(exporter):
    model, inputs = _model_and_inputs()
    graph = from_torch(model, inputs, exporter=exporter)
    assert graph.extension_attrib['exporter'] == exporter
    assert model.training  # restored after exporting in eval mode
    model.eval()
    with torch.no_grad():
        expected = model(**inputs)
    got = TorchExecutor(graph)(list(inputs.values()))[0]
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


class Difference(torch.nn.Module):

    def forward(self, a, b):
        return a - 2 * b


@pytest.mark.parametrize('exporter', EXPORTERS)
def test_keyword_inputs_become_graph_inputs_in_forward_order(exporter):
    # The dynamo exporter orders its inputs as the keywords come; fed in forward's
    # order they would compute b - 2 * a = 8.
    a, b = torch.tensor([1.0]), torch.tensor([10.0])
    graph = from_torch(Difference(), {'b': b, 'a': a}, exporter=exporter)
    assert TorchExecutor(graph)([a, b])[0].tolist() == [-19.0]


class ScaleShift(torch.nn.Module):

    def forward(self, x, affine):
        return x * affine['scale'] - affine['shift']


@pytest.mark.parametrize('exporter', EXPORTERS)
def test_a_dict_as_the_last_positional_argument(exporter):
    # torch.onnx reads a trailing dict of its args as keyword arguments; here it is
    # forward's positional argument ``affine``.
    x, affine = torch.tensor([2.0]), {'scale': torch.tensor([3.0]), 'shift': torch.tensor([1.0])}
    graph = from_torch(ScaleShift(), (x, affine), exporter=exporter)
    assert len(graph.inputs) == 3
    assert TorchExecutor(graph)([x, affine['scale'], affine['shift']])[0].tolist() == [5.0]


def test_auto_falls_back_to_torchscript_and_says_so(monkeypatch, caplog):
    export = torch.onnx.export

    def dynamo_fails(*args, dynamo=True, **kwargs):
        if dynamo:
            raise RuntimeError('cannot trace this')
        return export(*args, dynamo=dynamo, **kwargs)
    monkeypatch.setattr(torch.onnx, 'export', dynamo_fails)
    model, inputs = _model_and_inputs()
    with caplog.at_level(logging.INFO, logger='razorlib.ir.torch_export'):
        graph = from_torch(model, inputs)
    assert graph.extension_attrib['exporter'] == 'torchscript'
    assert 'cannot trace this' in caplog.text and 'falling back' in caplog.text
    assert 'exported with the torchscript exporter' in caplog.text
    with pytest.raises(RuntimeError, match='cannot trace this'):
        from_torch(model, inputs, exporter='dynamo')


def test_unknown_exporter_is_refused():
    with pytest.raises(ValueError, match="'jit'"):
        from_torch(torch.nn.ReLU(), torch.zeros(1), exporter='jit')
