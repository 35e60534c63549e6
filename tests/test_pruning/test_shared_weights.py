"""A weight two modules of one kind share (``s2.weight = s1.weight``): pruned alike.

Before, the tracer took the second module's op for the first's, so only the first got
masks and a slice plan, and slicing refused after allocation with "prune them in one
group" although the two were in one group.
"""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import razorlib
from razorlib.pruning import ChannelConfig, ChannelSelection, L1NormPruner, slim_model
from razorlib.utils import count_params, get_model_complexity


class SerialConvs(nn.Module):
    """``s2`` runs ``s1``'s kernel on ``s1``'s output: one group of 8 channels."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 8, 3, padding=1)
        self.s1, self.s2 = nn.Conv2d(8, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1)
        self.s2.weight = self.s1.weight
        self.b = nn.Conv2d(8, 5, 1)

    def forward(self, x):
        return self.b(F.relu(self.s2(F.relu(self.s1(F.relu(self.a(x))))))).mean((2, 3))


class ParallelLinears(nn.Module):
    """``s1`` and ``s2`` (each with its own bias) read two branches, whose channels the
    shared weight binds."""

    def __init__(self):
        super().__init__()
        self.a, self.c = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(3, 8, 1)
        self.s1, self.s2 = nn.Linear(8, 6), nn.Linear(8, 6)
        self.s2.weight = self.s1.weight
        self.b = nn.Linear(6, 5)

    def forward(self, x):
        left = F.relu(self.s1(F.relu(self.a(x).mean((2, 3)))))
        return self.b(left + F.relu(self.s2(F.relu(self.c(x).mean((2, 3))))))


class SharedNormScales(nn.Module):
    """Two batch norms share their scales; each keeps its own shift and statistics."""

    def __init__(self):
        super().__init__()
        self.a, self.c, self.b = nn.Conv2d(3, 8, 3), nn.Conv2d(8, 8, 1), nn.Conv2d(8, 5, 1)
        self.n1, self.n2 = nn.BatchNorm2d(8), nn.BatchNorm2d(8)
        self.n2.weight = self.n1.weight

    def forward(self, x):
        return self.b(F.relu(self.n2(self.c(F.relu(self.n1(self.a(x))))))).mean((2, 3))


def _trained_statistics(model):
    """Distinct shifts and running statistics, so a norm sliced wrong shows."""
    torch.manual_seed(1)
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.bias.data.normal_()
            module.running_mean.normal_()
            module.running_var.uniform_(0.5, 2)
    return model.eval()


@pytest.mark.parametrize('build, widths', [(SerialConvs, ('in_channels', 'out_channels')),
                                           (ParallelLinears, ('in_features', 'out_features')),
                                           (SharedNormScales, ('num_features', ))])
def test_modules_sharing_a_weight_are_pruned_alike_and_the_masked_model_is_the_slim(
        build, widths):
    torch.manual_seed(0)
    model, x = _trained_statistics(build()), torch.randn(2, 3, 6, 6)
    dense = copy.deepcopy(model)
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, x)
    first, second = [name for name in ('s1', 's2', 'n1', 'n2') if hasattr(model, name)]
    group, = [g for g in pruner.groups.groups.values() if second in g.layers + g.norms]
    assert first in group.layers + group.norms and not group.frozen
    pruner.set_subnet(pruner.subnet_at(0.5))
    with torch.no_grad():
        masked = model(x)
    slim = pruner.deploy_subnet(copy.deepcopy(model), pruner.export_subnet()).eval()
    with torch.no_grad():
        assert torch.allclose(slim(x), masked, atol=1e-6)
    assert getattr(slim, second).weight is getattr(slim, first).weight
    for width in widths:  # the second module's widths follow its sliced weight
        assert getattr(getattr(slim, second), width) == getattr(getattr(slim, first), width) \
            < getattr(getattr(dense, first), width)
    assert count_params(model) == sum(p.numel() for p in slim.parameters())
    assert get_model_complexity(model, x).flops == get_model_complexity(slim, x).flops


def test_razorlib_prune_slims_modules_sharing_a_weight():
    torch.manual_seed(0)
    model, x = SerialConvs().eval(), torch.randn(2, 3, 6, 6)
    slim = razorlib.prune(model, x, ratio=0.5)
    assert slim.s2.weight is slim.s1.weight and slim.s2.weight.shape == (4, 4, 3, 3)
    assert (slim.s2.in_channels, slim.s2.out_channels) == (4, 4)


class OtherWidths(nn.Module):
    """``s2`` is a 2-group conv of 16 inputs whose kernel is ``s1``'s of 8: no slicing fits
    both, so their channels stay whole, the reason naming both."""

    def __init__(self):
        super().__init__()
        self.a, self.d = nn.Conv2d(3, 8, 3), nn.Conv2d(3, 16, 3)
        self.s1, self.s2 = nn.Conv2d(8, 8, 3), nn.Conv2d(16, 8, 3, groups=2)
        self.s2.weight = self.s1.weight
        self.b = nn.Conv2d(8, 5, 1)

    def forward(self, x):
        left = F.relu(self.s1(F.relu(self.a(x))))
        return self.b(left + F.relu(self.s2(F.relu(self.d(x))))).mean((2, 3))


def test_modules_sharing_a_weight_at_other_widths_keep_their_channels_and_say_why():
    model, x = OtherWidths().eval(), torch.randn(1, 3, 8, 8)
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, x)
    for name in ('a', 'd', 's1', 's2'):
        group, = [g for g in pruner.groups.groups.values() if name in g.layers]
        assert group.frozen
    reasons = [str(r) for g in pruner.groups.groups.values() for r in g.frozen_reasons]
    assert any("s1.weight is also s2.weight, a second module that would slice it otherwise "
               "({'in': 8, 'out': 8} against {'in': 16, 'out': 8})" in r for r in reasons)
    slim = razorlib.prune(OtherWidths().eval(), x, ratio=0.5, strict=True)
    assert slim.s2.weight is slim.s1.weight and slim.s1.weight.shape == (8, 8, 3, 3)


def test_a_channel_config_that_leaves_one_owner_whole_is_refused_naming_it():
    model = SerialConvs()
    keep = ChannelSelection(8, (0, 2, 5, 7))
    with pytest.raises(ValueError, match=r'tied parameters would be sliced apart: s1.weight '
                       r'\(4, 4, 3, 3\), s2.weight \(8, 8, 3, 3\) \(the channel config leaves '
                       r's2 whole\)'):
        slim_model(model, ChannelConfig({'s1': {'in': keep, 'out': keep}}))
    assert model.s1.weight is model.s2.weight and model.s1.weight.shape == (8, 8, 3, 3)
