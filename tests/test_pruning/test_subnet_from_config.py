"""Seeded subnet sampling, and channel configs turned back into subnet dicts."""
import random

import pytest
import torch

from razorlib.models import ResNet
from razorlib.pruning import ChannelConfig, L1NormPruner, RatioPruner


@pytest.fixture(scope='module')
def resnet():
    """A residual net: its stages are groups that several layers and BNs share."""
    model = ResNet(depth=18, base_channels=8, stem='cifar', num_classes=10).eval()
    pruner = RatioPruner()
    pruner.prepare_from_supernet(model, torch.randn(1, 3, 8, 8))
    return model, pruner


def test_generators_seeded_alike_sample_the_same_subnet(resnet):
    _, pruner = resnet
    first, second = (pruner.sample_subnet(random.Random(4)) for _ in range(2))
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)
    other = pruner.sample_subnet(random.Random(5))
    assert any(not torch.equal(first[k], other[k]) for k in first)


@pytest.mark.parametrize('pruner_cls', [RatioPruner, L1NormPruner])
def test_an_exported_subnet_comes_back_from_its_channel_config(pruner_cls, tmp_path):
    torch.manual_seed(0)
    model = ResNet(depth=18, base_channels=8, stem='cifar', num_classes=10).eval()
    pruner = pruner_cls()
    pruner.prepare_from_supernet(model, torch.randn(1, 3, 8, 8))
    subnet = pruner.sample_subnet(random.Random(1)) if pruner_cls is RatioPruner else \
        {gid: torch.rand(len(keep)) > 0.5 for gid, keep in pruner.channel_spaces.items()}
    pruner.set_subnet(subnet)
    pruner.export_subnet().dump(tmp_path / 'subnet.yaml')
    expected = pruner.export_subnet()
    pruner.set_max_channel()
    restored = pruner.subnet_from_channel_config(tmp_path / 'subnet.yaml')
    assert all(torch.equal(restored[k], subnet[k]) for k in restored)
    pruner.set_subnet(restored)
    assert pruner.export_subnet() == expected


def test_a_config_of_another_architecture_names_its_first_wrong_module(resnet):
    _, pruner = resnet
    pruner.set_max_channel()
    data = pruner.export_subnet().to_dict()
    data['modules']['backbone_unknown.conv'] = dict(out_channels=1, raw_out_channels=1)
    with pytest.raises(ValueError, match='^modules.backbone_unknown.conv: the channel config '
                                         'keeps out 1/1, the supernet .* keeps no entry'):
        pruner.subnet_from_channel_config(ChannelConfig.from_dict(data))
    leader = next(iter(pruner.channel_spaces))
    data = pruner.export_subnet().to_dict()
    data['modules'][leader]['raw_out_channels'] = 99
    data['modules'][leader]['out_channels'] = 99
    with pytest.raises(ValueError, match=f'^modules.{leader}: raw_out_channels is 99'):
        pruner.subnet_from_channel_config(ChannelConfig.from_dict(data))
