"""A parameter the model's code reads outside autograd (``detach``, ``.data``,
``torch.no_grad``) leaves no node, so no rule lines it up with the channels it meets:
the tracer freezes them, naming the parameter (``tracing/literal_sizes.py``).

Before, the slim model failed (``verify=False``), was frozen only by the pruned run with
an error that named no parameter, or silently computed something else: a parameter
sliced with one group and read whole outside autograd (``alpha.detach().sum()``), or
returned as a model output (``(logits, self.alpha.detach())``).
"""
import copy

import pytest
import torch
import torch.nn as nn

from helpers import Traced
from masked_vs_slim import sample_and_deploy
from razorlib.pruning import L1NormPruner
from razorlib.tracing import TracingError
from razorlib.tracing.forward import flatten_tensors

X = torch.randn(2, 3, 8, 8)
OUTSIDE = ('read outside autograd (detach, .data, torch.no_grad, as Python numbers): its entries '
           'cannot follow')
READ = ('the code reads it outside autograd (detach, .data, torch.no_grad, as Python numbers), '
        'where its pruning')


class Net(nn.Module):
    """a (8 channels) and b (8 channels) -> ``step`` -> head (4 channels) -> pooled."""

    def __init__(self, step):
        super().__init__()
        self.a = nn.Conv2d(3, 8, 3, padding=1)
        self.b = nn.Conv2d(3, 8, 3, padding=1)
        self.head = nn.Conv2d(8, 4, 1)
        self.alpha = nn.Parameter(torch.rand(8) + 0.5)
        self.step = step

    def forward(self, x):
        return self.head(self.step(self, self.a(x), self.b(x))).mean((2, 3))


def _no_grad_copy(m, a, b):
    with torch.no_grad():
        alpha = m.alpha.clone()
    return a * alpha[:, None, None] + b


#: alpha meets a's channels only outside autograd: the op that combines them freezes.
COMBINED = {
    'detach().view': (lambda m, a, b: a * m.alpha.detach().view(1, -1, 1, 1) + b,
                      'MulBackward0'),
    '.data[None, :, None, None]': (lambda m, a, b: a + m.alpha.data[None, :, None, None] + b,
                                   'AddBackward0'),
    'a copy under no_grad': (_no_grad_copy, 'MulBackward0'),
}

#: alpha (or a's weight) is sliced with a group and also read whole outside autograd.
SLICED = {
    'a detached sum': (lambda m, a, b: a * m.alpha[:, None, None] * m.alpha.detach().sum()
                       + b, 'alpha'),
    'a Python number': (lambda m, a, b: a * m.alpha[:, None, None]
                        * float(m.alpha.detach().sum()) + b, 'alpha'),
    "a layer's weight": (lambda m, a, b: (a + b) * m.a.weight.detach().abs().mean(),
                         'a.weight'),
    'its values as numbers (tolist)': (lambda m, a, b: a * m.alpha[:, None, None]
                                       * sum(m.alpha.tolist()) + b, 'alpha'),
}


def _net(step):
    torch.manual_seed(0)
    return Net(step).eval()


def _untracked(traced, name):
    return [r for r in traced.reasons(name) if r.kind == 'untracked']


@pytest.mark.parametrize('case', COMBINED)
def test_channels_combined_with_a_detached_parameter_freeze_naming_it(case):
    step, op = COMBINED[case]
    traced = Traced(_net(step), X)
    (reason, ) = _untracked(traced, 'a')
    assert (reason.op, reason.upstream, reason.downstream) == (op, ('a', ), ('head', ))
    assert reason.message == f'combines these channels with alpha, {OUTSIDE} their pruning'
    assert not traced.group_of('a').prunable


@pytest.mark.parametrize('case', SLICED)
def test_a_sliced_parameter_read_outside_autograd_freezes_its_group(case):
    step, name = SLICED[case]
    (reason, ) = _untracked(Traced(_net(step), X), 'a')
    assert (reason.op, reason.message) == (name, f'{READ} cannot follow')


def test_a_copy_of_a_parameter_sliced_with_another_group_freezes_both():
    """alpha follows a's channels; its detached copy scales b's: with a's and b's kept
    channels the same (a pruned run halves every group alike) the slim model would
    compute what the masked one does, with any others it would not."""
    def step(m, a, b):
        return a * m.alpha[:, None, None] + b.mean(1, keepdim=True) + \
            (b * m.alpha.detach()[:, None, None]).sum(1, keepdim=True)
    traced = Traced(_net(step), X)
    assert [r.op for r in _untracked(traced, 'a')] == ['alpha']
    assert [r.op for r in _untracked(traced, 'b')] == ['MulBackward0']


@pytest.mark.parametrize('case', [*COMBINED, *SLICED])
def test_the_pruned_model_computes_what_the_masked_one_does(case):
    step = {**COMBINED, **SLICED}[case][0]
    model = _net(step)
    pruner = L1NormPruner(ratio=0.5, verify=False)  # the trace alone must be right
    pruner.prepare_from_supernet(model, X)
    assert set(pruner.groups.prunable) == set()
    slim = sample_and_deploy(pruner, model, X)
    assert (slim.a.out_channels, slim.b.out_channels, slim.alpha.shape) == (8, 8, (8, ))


def test_strict_raises_naming_the_parameter():
    with pytest.raises(TracingError, match=r'\[untracked\] MulBackward0: combines these '
                                           r'channels with alpha, read outside autograd'):
        Traced(_net(COMBINED['detach().view'][0]), X, strict=True)


def _to_its_dtype(m, a, b):
    scale = torch.full((), 2.0).to(m.alpha).type_as(m.alpha)
    return a * scale * m.alpha[:, None, None] + b


#: Reads that take a parameter's sizes, dtype or nothing at all: a stays prunable.
HARMLESS = {
    'a tracked read': lambda m, a, b: a * m.alpha[:, None, None] + b,
    'its dtype (to, type_as)': _to_its_dtype,
    'its size (zeros_like, detach().shape)': lambda m, a, b: a * m.alpha[:, None, None] + b
    + torch.zeros_like(m.alpha).sum() * m.alpha.detach().shape[0],
    'a detached copy never used': lambda m, a, b: a * m.alpha[:, None, None] + b
    + 0 * len([m.alpha.detach()]),
}


@pytest.mark.parametrize('case', HARMLESS)
def test_a_read_of_no_values_freezes_nothing(case):
    model = _net(HARMLESS[case])
    traced = Traced(model, X)
    assert not _untracked(traced, 'a') and traced.group_of('a').prunable
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, X)
    slim = sample_and_deploy(pruner, model, X)
    assert slim.a.out_channels < 8 and slim.alpha.shape[0] == slim.a.out_channels


def test_the_report_lists_the_reason():
    report = Traced(_net(SLICED['a detached sum'][0]), X).groups.report()
    assert f'FROZEN: [untracked] alpha: {READ} cannot follow' in report


class FrozenBackbone(nn.Module):
    """Features from a backbone run under ``no_grad`` (frozen), then a trained head."""

    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
                                      nn.Conv2d(8, 8, 3, padding=1))
        self.head1 = nn.Conv2d(8, 16, 1)
        self.head2 = nn.Conv2d(16, 4, 1)

    def forward(self, x):
        with torch.no_grad():
            features = self.backbone(x)
        return self.head2(self.head1(features).relu()).mean((2, 3))


def test_a_layer_on_features_computed_outside_autograd_stays_prunable():
    """head1 applies its own weights to the backbone's values: its output channels are
    its own, not the backbone's parameters lined up with traced channels."""
    torch.manual_seed(0)
    model = FrozenBackbone().eval()
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, X)
    assert list(pruner.groups.prunable) == ['head1']
    assert sample_and_deploy(pruner, model, X).head1.out_channels == 8


class TwoOutputs(nn.Module):
    """a (8 channels) scaled by alpha -> head -> pooled logits, and ``extra``: what the
    model returns besides them."""

    def __init__(self, extra):
        super().__init__()
        self.a = nn.Conv2d(3, 8, 3, padding=1)
        self.head = nn.Conv2d(8, 4, 1)
        self.alpha = nn.Parameter(torch.rand(8) + 0.5)
        self.extra = extra

    def forward(self, x):
        logits = self.head(self.a(x) * self.alpha[:, None, None]).mean((2, 3))
        return self.extra(self, logits)


def _no_grad_double(m):
    with torch.no_grad():
        return m.alpha * 2


#: A model output without autograd history computed from a parameter sliced with a's
#: group: the slim model would return fewer entries.
DETACHED_OUTPUTS = {
    'alpha.detach() in a tuple': (lambda m, y: (y, m.alpha.detach()), 'alpha'),
    'alpha.data in a dict': (lambda m, y: {'logits': y, 'alpha': m.alpha.data}, 'alpha'),
    'a computed under no_grad': (lambda m, y: (y, _no_grad_double(m)), 'alpha'),
    "a detached slice of a's weight": (lambda m, y: (y, m.a.weight.detach()[:, 0]),
                                       'a.weight'),
}


def _masked_and_slim_outputs(model, **kwargs):
    """The outputs (flattened) of ``model`` masked to a sampled subnet of L1NormPruner
    and of the slim model deployed from it."""
    pruner = L1NormPruner(ratio=0.5, **kwargs)
    pruner.prepare_from_supernet(model, X)
    torch.manual_seed(0)
    pruner.set_subnet(pruner.sample_subnet())
    slim = pruner.deploy_subnet(copy.deepcopy(model), pruner.export_subnet()).eval()
    with torch.no_grad():
        return flatten_tensors(model(X)), flatten_tensors(slim(X))


@pytest.mark.parametrize('case', DETACHED_OUTPUTS)
def test_a_parameter_returned_outside_autograd_freezes_its_group(case):
    extra, name = DETACHED_OUTPUTS[case]
    torch.manual_seed(0)
    (reason, ) = _untracked(Traced(TwoOutputs(extra).eval(), X), 'a')
    assert (reason.op, reason.message) == (name, f'{READ} cannot follow')


@pytest.mark.parametrize('case', DETACHED_OUTPUTS)
def test_a_parameter_returned_outside_autograd_keeps_the_outputs(case):
    """Before, a pruned and the slim model returned 4 entries of 8, the pruned run (on by
    default) included: no group was size-dependent, so nothing ran it."""
    torch.manual_seed(0)
    masked, slim = _masked_and_slim_outputs(TwoOutputs(DETACHED_OUTPUTS[case][0]).eval())
    assert [t.shape for t in slim] == [t.shape for t in masked]
    assert all(torch.allclose(s, m, atol=1e-6) for s, m in zip(slim, masked))


def test_a_parameter_returned_through_autograd_is_only_an_output():
    traced = Traced(TwoOutputs(lambda m, y: (y, m.alpha)).eval(), X)
    assert {r.kind for r in traced.reasons('a')} == {'output'}


def test_strict_raises_on_a_parameter_returned_outside_autograd():
    with pytest.raises(TracingError, match=r'\[untracked\] alpha: the code reads it outside '
                                           r'autograd'):
        Traced(TwoOutputs(DETACHED_OUTPUTS['alpha.detach() in a tuple'][0]), X, strict=True)
