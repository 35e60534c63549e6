"""A local ``ratio=`` is the fraction of each group kept, rounded by ``round_to`` to the
nearest allowed width (the larger on a tie), its smallest multiple a floor.

Read as a fraction pruned (Torch-Pruning's ``pruning_ratio``), ``ratio=0.1`` keeping 16
of 24 channels and ``ratio=0.9`` keeping all of them look like rounding errors; kept
fractions, they are 2.4 and 21.6 channels, whose nearest widths of 16 and 24 are 16
(the floor) and 24.  These pin that reading.
"""
import warnings

import pytest
import torch
import torch.nn as nn

import razorlib

X = torch.randn(1, 3, 8, 8)


def net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 24, 3), nn.ReLU(), nn.Conv2d(24, 24, 3), nn.ReLU(),
                         nn.Conv2d(24, 5, 1))


def pruned(ratio, round_to):
    """The conv widths of the slim copy, and the warnings said."""
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter('always')
        slim = razorlib.prune(net(), X, ratio=ratio, round_to=round_to)
    return [m.out_channels for m in slim if isinstance(m, nn.Conv2d)], \
        [str(w.message) for w in said]


@pytest.mark.parametrize('ratio, widths', [(0.5, [16, 16, 5]), (0.1, [16, 16, 5]),
                                           (0.34, [16, 16, 5]), (0.67, [16, 16, 5])])
def test_each_group_keeps_the_allowed_width_nearest_its_kept_share(ratio, widths):
    # 16 and 24 are allowed: 0.1 of 24 (2.4) keeps the floor, 0.67 (16.08) rounds down
    assert pruned(ratio, 16) == (widths, [])


@pytest.mark.parametrize('ratio, round_to', [(0.9, 16), (0.84, 16), (0.5, 32)])
def test_a_ratio_rounding_to_every_channel_is_said(ratio, round_to):
    # 0.84 of 24 (20.16) passes the tie at 20; under round_to=32 24 is the only width
    assert pruned(ratio, round_to) == ([24, 24, 5], [
        f'razorlib.prune: nothing was pruned: every channel is kept (round_to={round_to}); '
        'the model is returned whole'])
