"""Size-dependent groups are compared masked vs slim, not only run: code that sizes the
channels by hand can run pruned and compute something else (``view(B, self.k, -1)``
re-splits the slim rows), and a reduction over channels that autograd does not see
(``detach()``, ``torch.no_grad()``) averages the kept channels only.  Such groups freeze,
naming why; groups whose code follows the widths stay prunable and prune exactly."""
import copy
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import razorlib
from masked_vs_slim import sample_and_deploy
from razorlib.pruning import L1NormPruner
from razorlib.tracing import TracingError, build_groups, trace

X = torch.randn(2, 3, 8, 8)
OTHER = torch.randn(3, 3, 12, 10)
DIFFERS = 'the slim model computes other outputs than the masked one (relative error '
SIZED = ('the model code sizes these channels by hand or reads them outside autograd (a '
         'view, split or norm of sizes of its own, a size it read, detach, no_grad)')


def _literal_view(m, y):
    return y.view(y.shape[0], m.k, -1).softmax(-1).view_as(y)


def _no_grad_scale(m, y):
    with torch.no_grad():
        scale = y.pow(2).mean().sqrt()  # one number: no operand of a size of its own
    return y / (scale + 1)


INEXACT = {
    'a view with a literal channel count': _literal_view,
    'a mean over channels of detach()': lambda m, y: y * torch.sigmoid(
        y.detach().mean(1, keepdim=True)),
    'a mean over channels under no_grad': _no_grad_scale,
    'a min over channels of .data': lambda m, y: y / (1 + y.data.amin(1).mean()),
}
EXACT = {
    'a view with the channel count read': lambda m, y: y.view(
        y.shape[0], y.shape[1], -1).softmax(-1).view_as(y),
    'a detached per-channel scale': lambda m, y: y * torch.sigmoid(
        y.detach().mean((2, 3), keepdim=True)),
}


class Net(nn.Module):
    """c (8 channels) -> relu -> ``step`` -> o (6 channels) -> relu -> pooled -> fc."""

    def __init__(self, step):
        super().__init__()
        self.c, self.o, self.fc = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 6, 1), \
            nn.Linear(6, 3)
        self.k = 8
        self.step = step

    def forward(self, x):
        y = self.step(self, F.relu(self.c(x)))
        return self.fc(F.relu(self.o(y)).mean((2, 3)))


def _net(step):
    torch.manual_seed(0)
    return Net(step).eval()


@pytest.mark.parametrize('name', [*INEXACT, *EXACT])
def test_the_groups_are_size_dependent(name):
    step = {**INEXACT, **EXACT}[name]
    assert build_groups(trace(_net(step), X)).size_dependent == ['c']


@pytest.mark.parametrize('name', INEXACT)
def test_a_group_whose_slim_outputs_differ_freezes_naming_why(name):
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(_net(INEXACT[name]), X)
    assert set(pruner.groups.prunable) == {'o'}
    (reason, ) = [r for r in pruner.groups.groups['c'].frozen_reasons if r.kind == 'runtime']
    assert reason.op == 'c' and reason.message.startswith(DIFFERS)
    assert reason.message.endswith(SIZED)
    model = _net(INEXACT[name])
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        slim = razorlib.prune(copy.deepcopy(model), X, ratio=0.5)
    assert (slim.c.out_channels, slim.o.out_channels) == (8, 3)
    sample_and_deploy(pruner, pruner.model, X)
    slim = pruner.deploy_subnet(copy.deepcopy(pruner.model), pruner.export_subnet())
    with torch.no_grad():  # at another batch and size too
        assert (pruner.model(OTHER) - slim(OTHER)).abs().max() <= 1e-5


@pytest.mark.parametrize('name', INEXACT)
def test_strict_raises_instead(name):
    with pytest.raises(TracingError, match='sizes these channels by hand.*except_start_keys'):
        L1NormPruner(ratio=0.5, strict=True).prepare_from_supernet(_net(INEXACT[name]), X)


@pytest.mark.parametrize('name', EXACT)
def test_a_group_whose_code_follows_the_widths_prunes_exactly(name):
    model = _net(EXACT[name])
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, X)
    assert set(pruner.groups.prunable) == {'c', 'o'}
    slim = sample_and_deploy(pruner, model, X)  # masked == slim
    assert slim.c.out_channels < 8
    with torch.no_grad():
        assert (model(OTHER) - slim(OTHER)).abs().max() <= 1e-5
