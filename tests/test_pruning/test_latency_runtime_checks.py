"""Runtimes refuse what would make their figures wrong: an ONNX graph that is not the model
(a trace that froze part of the forward into constants), runtime options that are not whole
numbers, a misspelt runtime given with another budget, and a missing onnxruntime.  Nothing
timed is asserted beyond being positive."""
import inspect
import sys

import numpy as np
import pytest
import torch
import torch.nn as nn
from latency_fakes import X, net

import razorlib
from razorlib.pruning import ImportancePruner
from razorlib.pruning import api
from razorlib.pruning.importance import pruner as importance_pruner
from razorlib.pruning.runtimes import (OnnxRuntime, Runtime, TorchRuntime, build_runtime,
                                       check_runtime)
from razorlib.tracing.forward import flatten_tensors

ONCE = dict(warmup=0, repeat=1, cache_dir=False)


class NumpyBody(nn.Module):
    """The whole body goes through numpy: a trace keeps only the head, on a constant."""

    def __init__(self):
        super().__init__()
        self.body, self.head = net(), nn.Linear(10, 4)

    def forward(self, x):
        return self.head(torch.from_numpy(self.body(x).detach().numpy()))


class NumpyBranch(nn.Module):
    """A side branch goes through numpy: a trace keeps the main branch alone."""

    def __init__(self):
        super().__init__()
        self.aux, self.main = net(), net()

    def forward(self, x):
        return self.main(x) * torch.from_numpy(self.aux(x).detach().numpy())


class UnusedFirstInput(nn.Module):
    """Takes two positional inputs of different shapes and reads the second only."""

    def __init__(self):
        super().__init__()
        self.body = net()

    def forward(self, ignored, x):
        return self.body(x)


class DictOutput(nn.Module):
    """Returns a mapping of two tensors."""

    def __init__(self):
        super().__init__()
        self.body = net()

    def forward(self, x):
        logits = self.body(x)
        return {'logits': logits, 'best': logits.max(dim=1).values}


# ----------------------------------------------------------------------------- graphs
def test_a_graph_that_takes_none_of_the_inputs_is_refused_naming_model_and_tracer():
    with pytest.raises(RuntimeError) as err:
        OnnxRuntime(**ONCE).latency([NumpyBody().eval()], (X, ))
    message = str(err.value)
    numpy_line = inspect.getsourcelines(NumpyBody.forward)[1] + 1
    assert message.startswith("runtime 'onnxruntime': the NumpyBody exported to ONNX is not "
                              "the model: its graph takes none of the model's inputs (the "
                              f'tracer warned at test_latency_runtime_checks.py:{numpy_line}: '
                              'Converting a tensor to a NumPy array might cause the trace to '
                              'be incorrect)')
    assert message.endswith("measure it on runtime='torch' instead")


def test_a_graph_that_dropped_a_branch_is_refused_by_its_outputs_on_other_values():
    with pytest.raises(RuntimeError, match=r"the NumpyBranch exported to ONNX is not the model: "
                       r"on the example inputs with their values shuffled its output 0 "
                       r"differs from the model's by [0-9.e+-]+ \(relative\)"):
        OnnxRuntime(**ONCE).latency([NumpyBranch().eval()], (X, ))


def test_prune_on_onnxruntime_refuses_a_model_its_graph_is_not():
    model = NumpyBody().eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(RuntimeError, match="the NumpyBody exported to ONNX is not the model"):
        razorlib.prune(model, X, latency=0.7, runtime=dict(type='onnxruntime', **ONCE))
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


@pytest.mark.parametrize('model, inputs', [
    (net(), (X, )),
    (UnusedFirstInput().eval(), (torch.randn(2, 5), X)),
    (DictOutput().eval(), (X, )),
])
def test_a_faithful_graph_is_timed(model, inputs):
    (ms, ) = OnnxRuntime(**ONCE).latency([model], inputs)
    assert ms > 0
    # what is timed computes the model: each input fed to its own graph input (the unused
    # first one dropped by name, not the second taken for it), each output in order
    with torch.no_grad():
        expected = flatten_tensors(model(*inputs))
    got = OnnxRuntime(**ONCE).compile(model, inputs)()
    assert len(got) == len(expected)
    for want, have in zip(expected, got):
        torch.testing.assert_close(torch.from_numpy(have), want, rtol=1e-4, atol=1e-5)


class KeywordNet(nn.Module):
    """Takes its input by keyword: the export wraps it to take it positionally."""

    def __init__(self):
        super().__init__()
        self.body = net()

    def forward(self, image):
        return self.body(image)


def test_exporting_keyword_inputs_leaves_the_model_in_eval_mode():
    model = KeywordNet().eval()
    expected = model(image=X)
    (ms, ) = OnnxRuntime(**ONCE).latency([model], {'image': X})
    assert ms > 0 and not any(m.training for m in model.modules())
    assert torch.equal(model(image=X), expected)


# ----------------------------------------------------------------------------- options
@pytest.mark.parametrize('option, value', [
    ('threads', 1.9), ('threads', True), ('repeat', 2.7), ('warmup', 0.5), ('repeat', '3'),
    ('quantile', True), ('quantile', '0.5'),
])
def test_an_option_that_is_not_a_number_of_its_kind_is_refused_by_name(option, value):
    with pytest.raises(ValueError, match=rf'^TorchRuntime: {option}={value!r}: a '):
        build_runtime(dict(type='torch', **{option: value}))
    with pytest.raises(ValueError, match=rf'^TorchRuntime: {option}={value!r}: a '):
        TorchRuntime(**{option: value})


def test_whole_numbers_of_any_integer_type_are_taken():
    runtime = build_runtime(dict(type='torch', threads=np.int64(2), repeat=3, warmup=0,
                                 quantile=1))
    assert (runtime.threads, runtime.repeat, runtime.warmup, runtime.quantile) == (2, 3, 0, 1.0)


# ----------------------------------------------------------------------------- prune
@pytest.mark.parametrize('runtime, error, message', [
    ('onnxruntme', ValueError, "unknown latency runtime 'onnxruntme'"),
    (dict(type='torch', repeats=3), TypeError, r"'repeats' is not a key of the torch runtime"),
    (dict(type='torch', repeat=2.7), ValueError, r'TorchRuntime: repeat=2\.7: a whole number'),
    (None, TypeError, 'runtime=None'),
])
def test_prune_checks_the_runtime_whatever_the_budget(runtime, error, message):
    with pytest.raises(error, match=message):
        razorlib.prune(net(), X, flops=0.5, runtime=runtime)


@pytest.mark.parametrize('pruner', ['ImportancePruner', 'RatioPruner'])
def test_prune_checks_the_runtime_once(pruner, monkeypatch):
    """By the ImportancePruner when it is built, else (a pruner taking no runtime) by
    razorlib.prune itself: not both."""
    checked = []

    def counted(runtime):
        checked.append(runtime)
        return check_runtime(runtime)

    for module in (api, importance_pruner):
        monkeypatch.setattr(module, 'check_runtime', counted)
    razorlib.prune(net(), X, flops=0.5, runtime='onnxruntime', pruner=pruner)
    assert checked == ['onnxruntime']


class Untimed(Runtime):
    """A runtime that fails the test if anything is timed on it."""

    def latency(self, modules, inputs):
        raise AssertionError('timed without a latency budget')


@pytest.mark.parametrize('runtime', [Untimed(), dict(type='cuda', graph=True)])
def test_a_runtime_unused_by_the_budget_is_neither_built_nor_timed(runtime):
    slim = razorlib.prune(net(), X, flops=0.5, runtime=runtime)
    assert slim[0].out_channels < 32


# ----------------------------------------------------------------------------- onnxruntime
def test_a_missing_onnxruntime_is_named_with_the_way_out(monkeypatch):
    monkeypatch.setitem(sys.modules, 'onnxruntime', None)  # import fails as if not installed
    expected = (r"^runtime 'onnxruntime' needs the onnxruntime package, which cannot be "
                r"imported \(ModuleNotFoundError: .*\); install it \(pip install onnxruntime\) "
                r"or measure on runtime='torch'$")
    with pytest.raises(ImportError, match=expected):
        OnnxRuntime(**ONCE).latency([net()], (X, ))
    with pytest.raises(ImportError, match=expected):
        razorlib.prune(net(), X, latency=0.5, runtime=dict(type='onnxruntime', **ONCE))


@pytest.mark.parametrize('runtime', ['onnxruntme', dict(type='torch', repeats=3),
                                     dict(type='torch', repeat=2.7), None])
def test_an_importance_pruner_checks_its_runtime_when_built(runtime):
    with pytest.raises((ValueError, TypeError), match='onnxruntme|repeats|repeat=2.7|'
                       'runtime=None'):
        ImportancePruner(flops=0.5, runtime=runtime)
