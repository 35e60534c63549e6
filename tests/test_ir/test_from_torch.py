"""from_torch: which exporter, its fallback, the model's mode, keyword inputs."""
import logging

import pytest
import torch

from razorlib.ir import TorchExecutor, from_torch


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
