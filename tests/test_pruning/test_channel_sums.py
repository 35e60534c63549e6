"""A sum over channels (or a product of activations contracted over them) drops the
pruned channels' terms, which is exact only where the masked model's pruned channels are
zero at the sum.  An op after the layer can undo that (``exp``, ``sigmoid``, ``+ 1``), so
the pruner compares slim and masked outputs for the groups a sum reads and freezes those
that differ, naming why; a sum of the layer's own outputs stays prunable."""
import warnings

import pytest
import torch
import torch.nn as nn

import razorlib
from masked_vs_slim import sample_and_deploy
from razorlib.pruning import L1NormPruner
from razorlib.tracing import build_groups, trace

X = torch.randn(2, 3, 8, 8)

SUMS = {
    'a softmax written out': lambda y: y.exp() / y.exp().sum(1, keepdim=True),
    'a sigmoid gate summed': lambda y: y * torch.sigmoid(y).sum(1, keepdim=True),
    'a shift summed': lambda y: y * (y + 0.5).sum(1, keepdim=True),
    'a dot product of shifted maps': lambda y: y * torch.einsum(
        'nchw,nchw->nhw', y + 1, y + 1)[:, None],
}
EXACT = {
    'a sum of the outputs': lambda y: y * y.sum(1, keepdim=True),
    'a sum of squares': lambda y: y * y.square().sum(1, keepdim=True),
    'a dot product of the outputs': lambda y: y * torch.einsum('nchw,nchw->nhw', y, y)[:, None],
}


class Net(nn.Module):
    def __init__(self, step):
        super().__init__()
        self.a, self.b, self.fc = nn.Conv2d(3, 16, 3, padding=1), nn.Conv2d(16, 8, 1), \
            nn.Linear(8, 3)
        self.step = step

    def forward(self, x):
        return self.fc(torch.relu(self.b(self.step(self.a(x)))).mean((2, 3)))


def _net(step):
    torch.manual_seed(0)
    return Net(step).eval()


@pytest.mark.parametrize('name', [*SUMS, *EXACT])
def test_the_groups_a_sum_reads_are_known_to_the_groups(name):
    step = {**SUMS, **EXACT}[name]
    assert build_groups(trace(_net(step), X)).summed == ['a']


@pytest.mark.parametrize('name', SUMS)
def test_a_sum_of_channels_pruning_leaves_non_zero_freezes_them_naming_why(name):
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(_net(SUMS[name]), X)
    assert set(pruner.groups.prunable) == {'b'}
    (reason, ) = [r for r in pruner.groups.groups['a'].frozen_reasons if r.kind == 'runtime']
    assert reason.message.startswith('the slim model computes other outputs than the masked '
                                     'one (relative error ')
    assert reason.message.endswith('a sum over these channels reads them where pruning '
                                   'leaves them non-zero')
    model = _net(SUMS[name])
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        slim = razorlib.prune(model, X, ratio=0.5)
    assert (slim.a.out_channels, slim.b.out_channels) == (16, 4)
    with pytest.raises(Exception, match='a sum over these channels.*except_start_keys'):
        L1NormPruner(ratio=0.5, strict=True).prepare_from_supernet(_net(SUMS[name]), X)


@pytest.mark.parametrize('name', EXACT)
def test_a_sum_of_the_layer_outputs_prunes_exactly(name):
    model = _net(EXACT[name])
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, X)
    assert set(pruner.groups.prunable) == {'a', 'b'}
    slim = sample_and_deploy(pruner, model, X)  # masked == slim
    assert slim.a.out_channels < 16
