"""The pruned run that finds groups the model's code cannot follow (``pruning/verify.py``).

It checks only the size-dependent groups (``tracing/literal_sizes.py``); these tests hold
it to the same answer as checking every prunable group, and to leaving the model as it was.
"""
import copy

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from razorlib.pruning import L1NormPruner
from razorlib.pruning import verify
from razorlib.tracing import build_groups, trace
from zoo import ZOO

X = torch.randn(2, 3, 8, 8)


class Widths(nn.Module):
    """Two conv stages; ``step`` runs on stage a (8 channels) before stage b (6 channels)."""

    def __init__(self, step):
        super().__init__()
        self.a = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.b = nn.Conv2d(8, 6, 3, padding=1)
        self.fc = nn.Linear(6, 4)
        self.step = step
        self.width = 8

    def forward(self, x):
        y = self.step(self, torch.relu(self.bn(self.a(x))))
        return self.fc(torch.relu(self.b(y)).mean((2, 3)))


def _assert_width(m, y):
    assert y.shape[1] == m.width, 'unexpected width'
    return y


HARD_CODED = {
    'view': lambda m, y: y.reshape(y.shape[0], m.width, 64).view_as(y),
    'assert': _assert_width,
    'constant': lambda m, y: y + torch.ones(1, m.width, 1, 1),
    'masked_fill': lambda m, y: y.masked_fill(torch.arange(m.width).view(1, -1, 1, 1) > 5, 0.),
    'functional norm': lambda m, y: F.batch_norm(y, torch.zeros(m.width), torch.ones(m.width)),
}


def _runtime_frozen(model, inputs, every_group: bool):
    groups = build_groups(trace(model, inputs))
    ids = list(groups.prunable) if every_group else None
    return verify.freeze_unrunnable_groups(model, groups, groups.uses, inputs, ids=ids)


@pytest.mark.parametrize('name', HARD_CODED)
def test_a_hard_coded_width_freezes_its_group_and_only_it(name):
    model = Widths(HARD_CODED[name]).eval()
    failing = _runtime_frozen(model, X, every_group=False)
    assert list(failing) == ['a']
    assert failing == _runtime_frozen(model, X, every_group=True)
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, X)
    assert set(pruner.channel_spaces) == {'b'}
    assert pruner.groups.groups['a'].frozen_reasons[-1].kind == 'runtime'


@pytest.mark.parametrize('name', sorted(ZOO))
def test_checking_size_dependent_groups_finds_what_checking_all_does(name):
    entry = ZOO[name]
    torch.manual_seed(0)
    model, inputs = entry.build().eval(), entry.example_inputs()
    assert _runtime_frozen(model, inputs, every_group=False) == \
        _runtime_frozen(model, inputs, every_group=True)


@pytest.mark.parametrize('name', ['resnet_bottleneck', 'mobilenet_v2', 'densenet', 'vgg'])
def test_models_without_code_sized_channels_need_no_run(name, monkeypatch):
    def no_probe(*args, **kwargs):
        raise AssertionError('the pruned run should not be needed')
    monkeypatch.setattr(verify, '_Probe', no_probe)
    torch.manual_seed(0)
    model = ZOO[name].build().eval()
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, ZOO[name].example_inputs())
    assert pruner.channel_spaces


@pytest.mark.parametrize('meta', [True, False])
def test_the_pruned_run_leaves_the_model_as_it_was(meta):
    model = Widths(HARD_CODED['view']).eval()
    model.bn.train()
    tensors = {k: (v, v.clone()) for k, v in model.state_dict(keep_vars=True).items()}
    attrs = {name: dict(vars(m)) for name, m in model.named_modules()}
    groups = build_groups(trace(model, X, meta=meta))
    assert groups.graph.device == ('meta' if meta else 'real')
    assert list(verify.freeze_unrunnable_groups(model, groups, groups.uses, X)) == ['a']
    assert model.bn.training and not model.training
    assert {name: dict(vars(m)) for name, m in model.named_modules()} == attrs
    for key, tensor in model.state_dict(keep_vars=True).items():
        assert tensor is tensors[key][0] and torch.equal(tensor, tensors[key][1])
    assert model.a.out_channels == 8 and model.a.weight.shape == (8, 3, 3, 3)


class TiedWidths(nn.Module):
    """A ViT-style attention whose code ties the attention's width to the embedding's: it
    reads ``C`` from the input (``view_heads``: ``reshape(.., h, C // h)``, ``merge``:
    ``reshape(B, N, C)``).  Cut alike, the two groups run; either one cut alone fails."""

    def __init__(self, heads, view_heads):
        super().__init__()
        self.h, self.view_heads = heads, view_heads
        self.inp, self.qkv = nn.Linear(6, 4 * heads), nn.Linear(4 * heads, 12 * heads)
        self.proj, self.head = nn.Linear(4 * heads, 4 * heads), nn.Linear(4 * heads, 3)

    def forward(self, x):
        x = self.inp(x)
        B, N, C = x.shape
        width = C // self.h if self.view_heads else -1
        q, k, v = self.qkv(x).reshape(B, N, 3, self.h, width).permute(2, 0, 3, 1, 4)
        y = ((q @ k.transpose(-2, -1)).softmax(-1) @ v).transpose(1, 2).reshape(B, N, C)
        return self.head((x + self.proj(y)).mean(1))


@pytest.mark.parametrize('heads,view_heads', [(2, True), (4, False), (8, False)])
def test_groups_whose_widths_the_code_ties_are_each_cut_alone(heads, view_heads):
    """Every group left prunable runs cut on its own (what a search may choose), whether
    the widths tie through the whole-heads check (2 heads viewed by ``C // h``) or only
    through the pruned run, where groups cut by different fractions disagree."""
    torch.manual_seed(0)
    model, x = TiedWidths(heads, view_heads).eval(), torch.randn(2, 5, 6)
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, x)
    for gid in pruner.channel_spaces:
        group = pruner.groups.groups[gid]
        pruner.set_subnet({gid: group.keep_best(np.arange(group.num_channels), 1)})
        slim = pruner.deploy_subnet(copy.deepcopy(model), pruner.export_subnet())
        assert slim(x).shape == (2, 3)
    reasons = {gid: [r.kind for r in g.frozen_reasons] for gid, g in pruner.groups.groups.items()}
    assert reasons['inp'] == ['runtime'] and reasons['qkv'] == ['runtime']


class ProportionalCut(nn.Module):
    """Cuts its channels at half the width it reads, the halves through different ops: a
    slim model cuts its kept channels in half, the masked one at the dense half."""

    def __init__(self, how: str):
        super().__init__()
        self.how = how
        self.stem = nn.Conv2d(3, 16, 1)
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        y = self.stem(x)
        c = y.shape[1]
        a, b = y.split([c // 2, c - c // 2], 1) if self.how == 'split' else \
            (y[:, :c // 2], y[:, c // 2:])
        return self.head(torch.cat([a.relu(), b.sigmoid()], 1).mean((2, 3)))


@pytest.mark.parametrize('how', ['split', 'slice'])
def test_a_cut_in_proportion_to_the_width_is_checked_on_a_lopsided_half(how):
    """Every other channel of 16 keeps 4 in each half, as the slim model's cut at 8 // 2
    does by chance; a subnet that keeps 2 and 6 is cut otherwise, so the group freezes."""
    torch.manual_seed(0)
    model = ProportionalCut(how).eval()
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, torch.randn(2, 3, 8, 8))
    assert 'stem' not in pruner.groups.prunable
    assert 'a slice of these channels' in str(pruner.groups.groups['stem'].frozen_reasons[0])
