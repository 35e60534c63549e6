"""One API convention: the ratio argument, what deploy leaves of a pruner, in-place
functions returning their argument."""
import pytest
import torch
import torch.nn as nn

from razorlib.pruning import AUTOSLIM_RATIOS, L1NormPruner, RatioPruner, slim_model


def _net():
    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 4, 1))


@pytest.mark.parametrize('cls', [L1NormPruner, RatioPruner])
def test_both_pruners_take_ratio_or_ratios_as_a_float_or_a_sequence(cls):
    for kwargs in (dict(ratio=0.5), dict(ratios=0.5), dict(ratio=(0.25, 0.5)),
                   dict(ratios=[0.25, 0.5])):
        expected = (0.5, ) if isinstance(next(iter(kwargs.values())), float) else (0.25, 0.5)
        assert cls(**kwargs).ratios == expected
    with pytest.raises(ValueError, match='not both'):
        cls(ratio=0.5, ratios=0.5)


def test_defaults():
    assert L1NormPruner().ratios == (0.5, )
    assert RatioPruner().ratios == AUTOSLIM_RATIOS


def test_a_pruner_consumed_by_deploy_says_so():
    model, x = _net(), torch.randn(1, 3, 8, 8)
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, x)
    pruner.set_subnet(pruner.sample_subnet())
    slim = pruner.deploy_subnet(model, pruner.export_subnet())
    assert slim is model
    with pytest.raises(RuntimeError, match='consumed by deploy_subnet'):
        pruner.channel_spaces
    fresh = L1NormPruner(ratio=0.5)
    with pytest.raises(RuntimeError, match='call prepare_from_supernet'):
        fresh.channel_spaces


def test_slim_model_returns_its_argument():
    model, x = _net(), torch.randn(1, 3, 8, 8)
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, x)
    cfg = pruner.export_subnet()
    other = _net()
    assert slim_model(other, cfg) is other
