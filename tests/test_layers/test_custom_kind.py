"""A layer kind defined outside razorlib, registered from this test module, pruned end to
end: traced, masked, sliced, scored and counted by its kind (docs/layer_kinds.md)."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from razorlib.layers import LayerKind, SlicePlan, take
from razorlib.pruning import L1NormPruner
from razorlib.registry import LAYER_KINDS
from razorlib.utils import get_model_complexity


class ScaledLinear(nn.Module):
    """``y = (x W^T) * scale + bias``: a user's layer, unknown to razorlib."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_features, in_features) / in_features**0.5)
        self.scale = nn.Parameter(torch.rand(out_features) + 0.5)
        self.bias = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        return F.linear(x, self.weight) * self.scale + self.bias


class ScaledLinearKind(LayerKind):
    module_types = (ScaledLinear, )
    axes = ('in', 'out')
    grad_fns = ('MmBackward0', )  # F.linear without bias on 2-D input

    def widths(self, module):
        out_features, in_features = module.weight.shape
        return {'in': in_features, 'out': out_features}

    def trace(self, ctx, node, ins, name, module):
        widths = self.widths(module)
        in_slots = ctx.channel_input(ins[0], 1, widths['in'], name, node)
        out_slots = ctx.layer_out(name, widths['out'])
        ctx.use(name, 'in', in_slots)
        ctx.use(name, 'out', out_slots)
        return out_slots, 1

    def plan_slice(self, name, module, kept):
        widths = self.widths(module)
        rows = kept.get('out', range(widths['out']))
        cols = kept.get('in', range(widths['in']))
        return SlicePlan(params={'weight': take(take(module.weight, 0, rows), 1, cols),
                                 'scale': take(module.scale, 0, rows),
                                 'bias': take(module.bias, 0, rows)})

    def channel_weights(self, module, axis):
        weight = module.weight.detach()
        return weight * module.scale.detach()[:, None] if axis == 'out' else weight.t()

    def params(self, module, kept):
        kept = self.full(module, kept)
        return kept['in'] * kept['out'] + 2 * kept['out']

    def flops(self, module, inputs, output, kept):
        kept = self.full(module, kept)
        return output.numel() // self.widths(module)['out'] * kept['in'] * kept['out']


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = ScaledLinear(6, 16)
        self.b = ScaledLinear(16, 12)
        self.head = nn.Linear(12, 3)

    def forward(self, x):
        return self.head(F.relu(self.b(F.relu(self.a(x)))))


@pytest.fixture
def registered():
    LAYER_KINDS.register_module(module=ScaledLinearKind)
    yield ScaledLinearKind
    LAYER_KINDS._module_dict.pop('ScaledLinearKind')


def _prune(model, x, **kwargs):
    pruner = L1NormPruner(ratio=0.5, **kwargs)
    pruner.prepare_from_supernet(model, x)
    pruner.set_subnet(pruner.sample_subnet())
    return pruner


@pytest.mark.parametrize('how', ['registered', 'for one pruner'])
def test_a_custom_layer_is_pruned_end_to_end(request, how):
    torch.manual_seed(0)
    model, x = Net().eval(), torch.randn(4, 6)
    if how == 'registered':
        request.getfixturevalue('registered')
        pruner = _prune(model, x)
    else:
        pruner = _prune(model, x, layer_kinds=[ScaledLinearKind])
    groups = pruner.groups
    assert set(groups.prunable) == {'a', 'b'}
    assert groups.prunable['a'].layers == ['a']
    cfg = pruner.export_subnet()
    assert cfg.modules['b'] == {'in': cfg.modules['a']['out'], 'out': cfg.modules['b']['out']}
    with torch.no_grad():
        masked = model(x)
    masked_count = get_model_complexity(model, x, layer_kinds=pruner.kinds)
    slim = pruner.deploy_subnet(copy.deepcopy(model), cfg)
    assert slim.a.weight.shape == (8, 6) and slim.a.scale.shape == (8, )
    assert slim.b.weight.shape == (6, 8)
    with torch.no_grad():
        torch.testing.assert_close(slim(x), masked)
    assert masked_count.params == sum(p.numel() for p in slim.parameters())
    assert masked_count.flops == get_model_complexity(slim, x, layer_kinds=pruner.kinds).flops


def test_the_custom_kind_scores_channels_by_its_own_weights(registered):
    torch.manual_seed(0)
    model, x = Net().eval(), torch.randn(4, 6)
    with torch.no_grad():
        model.a.scale[:8] = 100.0  # the first half of a's outputs matter most
    pruner = _prune(model, x)
    assert pruner.export_subnet().modules['a']['out'].index == tuple(range(8))


def test_without_a_kind_the_layer_is_not_pruned_as_a_layer():
    torch.manual_seed(0)
    pruner = _prune(Net().eval(), torch.randn(4, 6))
    assert all(group.layers != ['a'] for group in pruner.groups.prunable.values())
    assert 'ScaledLinearKind' not in LAYER_KINDS.module_dict
