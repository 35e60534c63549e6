"""A slice of a channel dim at bounds the code computes (a gated unit written by hand,
Phi-3's fused projections): the channels it takes follow the slice, and the pruner
checks on the model that the slim slice takes the kept ones (bounds computed from the
widths) or freezes them, naming why (a literal bound)."""
import pytest
import torch
import torch.nn as nn

from masked_vs_slim import sample_and_deploy
from razorlib.pruning import L1NormPruner
from razorlib.tracing import TracingError

X = torch.randn(2, 3, 8, 8)


class Sliced(nn.Module):
    """A gated unit written by hand: the first ``bound(a)`` of 16 channels times the
    rest (the two halves are bound elementwise, so they keep the same positions)."""

    def __init__(self, bound):
        super().__init__()
        self.bound = bound
        self.a = nn.Conv2d(3, 16, 3, padding=1)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        a = self.a(x)
        split = self.bound(a)
        return self.head((a[:, :split] * torch.sigmoid(a[:, split:])).mean((2, 3)))


def _model(bound):
    torch.manual_seed(0)
    return Sliced(bound).eval()


def test_a_slice_at_bounds_that_follow_the_widths_prunes_exactly():
    model = _model(lambda a: a.shape[1] // 2)
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, X)
    assert set(pruner.groups.prunable) >= {'a'}
    assert pruner.groups.sliced == ['a']
    slim = sample_and_deploy(pruner, model, X)  # masked == slim
    assert slim.a.out_channels < 16


class Window(nn.Module):
    """A head reads channels 4:12 of 16 (a literal bound), a conv all of them."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 16, 3, padding=1)
        self.b = nn.Conv2d(16, 3, 1)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        a = torch.relu(self.a(x))
        return self.head(a[:, 4:12].mean((2, 3))) + self.b(a).mean((2, 3))


def test_a_slice_at_a_literal_bound_freezes_its_channels_naming_why():
    """Halved to its first 8 channels (the run that looks for errors) the slim model runs;
    halved to every other channel it reads other channels than the masked one."""
    torch.manual_seed(0)
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(Window().eval(), X)
    assert 'a' not in pruner.groups.prunable
    (reason, ) = pruner.groups.groups['a'].frozen_reasons
    assert reason.message.startswith('the slim model computes other outputs than the masked')
    assert reason.message.endswith('a slice of these channels takes them at bounds the code '
                                   'computes')
    with pytest.raises(TracingError, match='compute the bounds from the widths'):
        L1NormPruner(ratio=0.5, strict=True).prepare_from_supernet(Window().eval(), X)


def test_on_the_meta_device_a_sliced_group_freezes():
    with torch.device('meta'):
        model = Sliced(lambda a: a.shape[1] // 2).eval()
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, X.to('meta'))
    assert 'a' not in pruner.groups.prunable
    assert [r.message for r in pruner.groups.groups['a'].frozen_reasons] == [
        'a slice of these channels takes them at bounds the code computes, which only a run '
        'on real weights can check (the model is on the meta device)']
