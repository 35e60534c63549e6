"""``torch.roll`` along a channel dim: a permutation of the channels, traced so that the
channels it wraps around stay whole and the others prune, the slim model computing (and
counting) what the masked one does."""
import numpy as np
import pytest
import torch
import torch.nn as nn

from helpers import Traced
from masked_vs_slim import deploy_checked, main_output
from razorlib.pruning import L1NormPruner
from razorlib.tracing import build_groups, trace
from razorlib.utils import get_model_complexity

X = torch.randn(2, 3, 6, 6)

#: rolls of the 8 channels of dim 1 (with a spatial dim in some), and their shift there
ROLLS = {
    'by 1': (lambda m, y: torch.roll(y, 1, 1), 1),
    'by -3': (lambda m, y: torch.roll(y, -3, 1), -3),
    'Tensor.roll, dim -3': (lambda m, y: y.roll(-1, -3), -1),
    'keywords, with a spatial dim': (
        lambda m, y: torch.roll(input=y, shifts=(2, 1), dims=(1, -1)), 2),
    'a spatial shift read from the tensor': (
        lambda m, y: y.roll((y.shape[2] // 2, 3), (2, 1)), 3),
}


class Rolled(nn.Module):
    """conv ``a`` (8 channels) -> ``roll`` -> conv ``b``."""

    def __init__(self, roll):
        super().__init__()
        self.roll = roll
        self.a, self.b = nn.Conv2d(3, 8, 1), nn.Conv2d(8, 4, 3, padding=1)

    def forward(self, x):
        return self.b(self.roll(self, self.a(x)))


class Residual(nn.Module):
    """conv ``stem`` (8 channels) -> conv ``a`` -> ``roll``, plus ``stem`` -> conv ``b``: the
    roll binds ``a``'s channel ``c`` to ``stem``'s channel ``(c + s) % 8``."""

    def __init__(self, roll):
        super().__init__()
        self.roll = roll
        self.stem, self.b = nn.Conv2d(3, 8, 1), nn.Conv2d(8, 4, 1)
        self.a = nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x):
        s = self.stem(x)
        return self.b(self.roll(self, self.a(torch.relu(s))) + s)


def _wrapped(channels: np.ndarray, shift: int) -> np.ndarray:
    """The channels a roll by ``shift`` carries around the end."""
    return channels[len(channels) - shift:] if shift > 0 else channels[:-shift]


@pytest.mark.parametrize('case', sorted(ROLLS))
def test_a_roll_over_channels_permutes_them_and_keeps_those_it_wraps_whole(case):
    roll, shift = ROLLS[case]
    traced = Traced(Rolled(roll), X, strict=True)
    a = traced.classes('a')
    assert (traced.classes('b', 'in') == np.roll(a, shift)).all()
    group = traced.group_of('a')
    assert group.prunable and group.num_channels == 8 - abs(shift)
    assert sorted(group.kept.tolist()) == sorted(_wrapped(a, shift).tolist())
    assert [(r.kind, r.op) for r in group.kept_reasons] == [('kept', 'RollBackward0')]
    assert f'rolls channel dim 1 by {shift}: the {abs(shift)} channels it wraps around stay' \
        in group.kept_reasons[0].message


def test_a_residual_roll_binds_each_channel_to_the_one_it_lands_on():
    traced = Traced(Residual(ROLLS['by -3'][0]), X)
    assert (np.roll(traced.classes('a'), -3) == traced.classes('stem')).all()
    group = traced.group_of('stem')
    assert group.prunable and group.num_channels == 5 and set(group.layers) == {'stem', 'a'}


#: keep masks over the prunable channels: every other, the first, the last, all but one
def _keeps(count: int):
    return [np.arange(count) % 2 == 0, np.arange(count) == 0, np.arange(count) == count - 1,
            np.arange(count) != count // 2]


@pytest.mark.parametrize('net,leader', [(Rolled, 'a'), (Residual, 'stem')])
@pytest.mark.parametrize('case', ['by 1', 'by -3', 'keywords, with a spatial dim'])
def test_pruned_rolls_compute_and_count_what_their_slim_models_do(net, leader, case):
    """Every kept channel lands where the slim roll puts it: masked and slim outputs and
    FLOPs agree, and the pruner (which compares them itself) leaves the group prunable."""
    roll, shift = ROLLS[case]
    torch.manual_seed(0)
    model = net(roll).eval()
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, X)
    count = 8 - abs(shift)
    assert {gid: g.num_channels for gid, g in pruner.groups.prunable.items()} == {leader: count}
    full = get_model_complexity(model, X).flops
    for keep in _keeps(count):
        pruner.set_subnet({leader: torch.from_numpy(keep)})
        masked, slim = deploy_checked(pruner, model, X)
        assert torch.allclose(main_output(slim, X), masked, rtol=0, atol=1e-6)
        assert getattr(slim, leader).out_channels == keep.sum() + abs(shift)
        flops = get_model_complexity(slim, X).flops
        assert get_model_complexity(model, X).flops == flops < full


@pytest.mark.parametrize('roll,message', [
    (lambda m, y: torch.roll(y, y.shape[1] // 2, 1),
     "rolls channel dim 1 by 4, a shift not seen given as a number of the code's own"),
    (lambda m, y: torch.ops.aten.roll(y, [1], [1]),
     "rolls channel dim 1 by 1, a shift not seen given as a number of the code's own"),
    (lambda m, y: torch.roll(y, 9, 1),
     'rolls channel dim 1 by 9, not less than its 8 channels'),
    (lambda m, y: torch.roll(y, -8, 1),
     'rolls channel dim 1 by -8, not less than its 8 channels'),
], ids=['shift read from the tensor', 'call the watch does not see', 'shift 9 of 8',
        'shift -8 of 8'])
def test_rolls_the_slim_model_cannot_follow_freeze_the_channels(roll, message):
    (reason, ) = Traced(Rolled(roll), X).reasons('a')
    assert (reason.kind, reason.op) == ('mixing', 'RollBackward0')
    assert reason.message.startswith(message)


def test_a_shift_from_a_width_attribute_is_caught_by_the_pruned_run():
    """``self.a.out_channels // 2`` is a plain int to the trace, but slicing rewrites the
    attribute: the roll makes the group size-dependent, and the pruner, finding the slim
    model computing something else, freezes it."""
    model = Rolled(lambda m, y: torch.roll(y, m.a.out_channels // 2, 1)).eval()
    assert build_groups(trace(model, X)).size_dependent == ['a']
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, X)
    assert not pruner.groups.prunable
    (reason, ) = pruner.groups.groups['a'].frozen_reasons
    assert reason.kind == 'runtime'
    assert 'the slim model computes other outputs than the masked one' in reason.message


def test_a_roll_of_spatial_dims_only_is_not_size_dependent():
    """Swin's shifted windows roll the spatial dims: no pruned run is needed for them."""
    model = Rolled(lambda m, y: torch.roll(y, (-2, 3), (2, 3)))
    assert build_groups(trace(model, X)).size_dependent == []
