"""Whole heads split by a head count of the model's own: ``reshape(B, N, self.h, -1)``
with ``self.h`` no ``HEAD_ATTRIBUTES`` entry rewrites would split the slim channels into
as many narrower heads, without an error.  The pruner compares slim and masked outputs
for the groups read as whole heads and freezes those that differ, naming why."""
import warnings

import pytest
import torch
import torch.nn as nn

import razorlib
from masked_vs_slim import sample_and_deploy
from razorlib.pruning import L1NormPruner
from razorlib.tracing import build_groups, trace

X = torch.randn(2, 6, 8)


class Attention(nn.Module):
    """Fused q/k/v split into heads by ``view``; ``count`` picks how the code sizes it."""

    def __init__(self, count: str, dim: int = 32, heads: int = 4):
        super().__init__()
        self.count, self.h, self.head_dim = count, heads, dim // heads
        self.inp, self.qkv = nn.Linear(8, dim), nn.Linear(dim, 3 * dim)
        self.proj, self.out = nn.Linear(dim, dim), nn.Linear(dim, 5)

    def forward(self, x):
        x = self.inp(x)
        b, n, _ = x.shape
        shape = {'own count': (b, n, self.h, -1), 'inferred count': (b, n, -1, self.head_dim)}
        q, k, v = (t.reshape(shape[self.count]).transpose(1, 2)
                   for t in self.qkv(x).chunk(3, -1))
        o = ((q @ k.transpose(-1, -2)) * self.head_dim ** -0.5).softmax(-1) @ v
        return self.out(x + self.proj(o.transpose(1, 2).reshape(b, n, -1)))


def _pruner(model, **kwargs):
    pruner = L1NormPruner(ratio=0.5, except_start_keys=('inp', ), **kwargs)
    pruner.prepare_from_supernet(model, X)
    return pruner


def test_groups_read_as_whole_heads_are_known_to_the_groups():
    groups = build_groups(trace(Attention('own count').eval(), X, except_start_keys=('inp', )))
    assert groups.whole_heads == ['qkv']
    assert build_groups(trace(Attention('own count').eval(), X, heads='width')).whole_heads \
        == []


def test_a_head_count_of_the_code_own_freezes_the_heads_naming_why():
    torch.manual_seed(0)
    model = Attention('own count').eval()
    pruner = _pruner(Attention('own count').eval())
    assert 'qkv' not in pruner.groups.prunable
    (reason, ) = [r for r in pruner.groups.groups['qkv'].frozen_reasons if r.kind == 'runtime']
    assert reason.message.startswith("heads='whole': the slim model computes other outputs "
                                     'than the masked one (relative error ')
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        slim = razorlib.prune(model, X, ratio=0.5, except_start_keys=['inp'])
    with torch.no_grad():
        assert torch.equal(slim(X), model(X))  # nothing else to prune: the model as it was


def test_an_inferred_head_count_prunes_whole_heads_exactly():
    torch.manual_seed(0)
    model = Attention('inferred count').eval()
    pruner = _pruner(model)
    assert pruner.groups.prunable['qkv'].num_channels == 4  # heads
    slim = sample_and_deploy(pruner, model, X)  # masked == slim, params exact
    assert slim.qkv.out_features == 48


def test_strict_raises_instead_naming_what_to_do():
    with pytest.raises(Exception, match=r"heads='whole': the slim model computes other outputs.*"
                       r'view by -1 heads, or register a HEAD_ATTRIBUTES entry'):
        _pruner(Attention('own count').eval(), strict=True)
