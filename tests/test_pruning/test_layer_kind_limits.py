"""Layers whose channels a plain slice would get wrong: ``nn.PReLU`` slopes sliced with
their ``num_parameters``, ``nn.Embedding(max_norm=...)`` kept whole, and channels that
reach a layer on a dim other than its channel dim (rows of a Linear over tokens, the
batch of a conv) kept whole: the slim model computes what the masked one does."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from masked_vs_slim import sample_and_deploy
from razorlib.pruning import L1NormPruner


def _prepared(model, x):
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, x)
    return pruner


class PReLUNet(nn.Module):
    def __init__(self, slopes: int):
        super().__init__()
        self.c, self.act, self.o = nn.Conv2d(3, 8, 3), nn.PReLU(slopes), nn.Conv2d(8, 4, 1)
        nn.init.uniform_(self.act.weight, -1, 1)

    def forward(self, x):
        return self.o(self.act(self.c(x))).mean((2, 3))


def test_prelu_slopes_are_sliced_with_num_parameters():
    torch.manual_seed(0)
    model, x = PReLUNet(8).eval(), torch.randn(2, 3, 8, 8)
    slopes = model.act.weight.detach().clone()
    pruner = _prepared(model, x)
    assert pruner.groups.prunable['c'].norms == ['act']
    slim = sample_and_deploy(pruner, model, x)  # masked == slim, counted alike
    kept = list(pruner.export_subnet().kept('c', 'out').index)
    assert slim.act.num_parameters == len(kept) == slim.c.out_channels < 8
    assert torch.equal(slim.act.weight.detach(), slopes[kept])
    fresh = nn.PReLU(slim.act.num_parameters)
    fresh.load_state_dict(slim.act.state_dict())
    assert repr(fresh) == repr(slim.act)


def test_one_shared_prelu_slope_stays_whole():
    torch.manual_seed(0)
    model, x = PReLUNet(1).eval(), torch.randn(2, 3, 8, 8)
    slim = sample_and_deploy(_prepared(model, x), model, x)
    assert slim.c.out_channels < 8
    assert slim.act.num_parameters == 1 and slim.act.weight.shape == (1, )


class Lookup(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb, self.fc, self.head = nn.Embedding(20, 8, max_norm=1.0), nn.Linear(8, 6), \
            nn.Linear(6, 4)

    def forward(self, ids):
        return self.head(F.relu(self.fc(self.emb(ids))))


def test_an_embedding_with_max_norm_keeps_its_embedding_dim():
    torch.manual_seed(0)
    model, ids, new_ids = Lookup().eval(), torch.arange(10).view(2, 5), \
        torch.arange(10, 20).view(2, 5)
    pruner = _prepared(model, ids)
    assert set(pruner.groups.prunable) == {'fc'}
    sample_and_deploy(pruner, model, ids)
    slim = pruner.deploy_subnet(copy.deepcopy(model), pruner.export_subnet())
    assert slim.emb.embedding_dim == 8 and slim.fc.out_features < 6
    with torch.no_grad():  # tokens the example did not renormalise
        assert (model(new_ids) - slim(new_ids)).abs().max() <= 1e-5


class TokenMixer(nn.Module):
    """A Linear over the tokens of ``(B, T, C)`` between two prunable layers."""

    def __init__(self):
        super().__init__()
        self.emb, self.tok, self.mid, self.out = nn.Linear(6, 8), nn.Linear(5, 7), \
            nn.Linear(8, 10), nn.Linear(10, 3)

    def forward(self, x):
        h = F.relu(self.emb(x))
        h = self.tok(h.transpose(1, 2)).transpose(1, 2)
        return self.out(F.relu(self.mid(h)))


class BatchFolded(nn.Module):
    """One 3x3 filter shared by every channel of ``c``, the channels folded into the
    batch, then a prunable 1x1 conv."""

    def __init__(self):
        super().__init__()
        self.c, self.blur = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(1, 1, 3, padding=1)
        self.o, self.fc = nn.Conv2d(8, 6, 1), nn.Linear(6, 3)

    def forward(self, x):
        y = F.relu(self.c(x))
        b, c, h, w = y.shape
        y = self.blur(y.reshape(b * c, 1, h, w)).reshape(b, c, h, w)
        return self.fc(F.relu(self.o(y)).mean((2, 3)))


class OverLength(nn.Module):
    """A Linear over the length of ``(B, C, L)``, then a mean over the channels."""

    def __init__(self):
        super().__init__()
        self.c, self.tok, self.out = nn.Conv1d(3, 8, 1), nn.Linear(16, 12), nn.Linear(12, 4)

    def forward(self, x):
        return self.out(F.relu(self.tok(F.relu(self.c(x)))).mean(1))


@pytest.mark.parametrize('build, x, other, prunable', [
    (TokenMixer, torch.randn(2, 5, 6), torch.randn(3, 5, 6), {'mid'}),
    (BatchFolded, torch.randn(2, 3, 8, 8), torch.randn(3, 3, 12, 10), {'o'}),
    (OverLength, torch.randn(2, 3, 16), torch.randn(5, 3, 16), {'tok'}),
])
def test_channels_on_another_dim_of_a_layer_input_are_kept(build, x, other, prunable):
    torch.manual_seed(0)
    model = build().eval()
    with torch.no_grad():
        dense = model(other)
    pruner = _prepared(model, x)
    assert set(pruner.groups.prunable) == prunable
    sample_and_deploy(pruner, model, x)
    slim = pruner.deploy_subnet(copy.deepcopy(model), pruner.export_subnet())
    with torch.no_grad():  # at another batch (and size)
        masked, out = model(other), slim(other)
    assert out.shape == dense.shape and (masked - out).abs().max() <= 1e-5
