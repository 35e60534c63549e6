"""A width (OneShotMutableChannel) nested inside a chosen op: sampled, set, exported,
checked, and fixed to a plain block of that width with the supernet's outputs."""
import random

import pytest
import torch

from razorlib.algorithms import SPOS
from razorlib.nas import (FixedSubnet, NasMutator, OneShotMutableChannel, ShuffleBlock,
                          fix_subnet, remaining_mutables)
from razorlib.registry import MODELS, MUTABLES

#: Two searched layers; each is an op among two width-searched shuffle blocks and the
#: (fixed-width) xception block.
WIDTHS = dict(
    type='ImageClassifier',
    backbone=dict(type='SearchableShuffleNetV2', arch_setting=[(16, 3, 2)], stem_channels=8,
                  stem='cifar', last_channels=None, downsample='shuffle_xception',
                  candidates=dict(
                      shuffle_3x3=dict(type='DynamicShuffleBlock', kernel_size=3,
                                       mid_ratios=(0.25, 0.5, 1.0)),
                      shuffle_5x5=dict(type='DynamicShuffleBlock', kernel_size=5,
                                       mid_ratios=(0.5, 1.0)),
                      shuffle_xception=dict(type='ShuffleXception'))),
    head=dict(type='LinearClsHead', num_classes=10))
OP = 'backbone.stages.0.1'
WIDTH = f'{OP}.candidates.shuffle_3x3.width'


def build():
    torch.manual_seed(0)
    model = MODELS.build(WIDTHS).eval()
    return model, NasMutator(model)


def test_the_width_is_a_mutable_of_the_space_that_counts_only_under_its_op():
    model, mutator = build()
    assert mutator.choices[WIDTH] == [0.25, 0.5, 1.0]
    assert mutator.choices[f'{OP}.candidates.shuffle_5x5.width'] == [0.5, 1.0]
    assert [c.key for c in mutator.conditions[WIDTH]] == [OP]
    subnet = {OP: 'shuffle_3x3', WIDTH: 0.5, 'backbone.stages.0.2': 'shuffle_xception'}
    mutator.set(subnet)
    assert mutator.active(mutator.current()) == subnet
    # the same network whatever the width of an op that is not chosen
    other = dict(mutator.current(), **{f'{OP}.candidates.shuffle_5x5.width': 0.5})
    assert mutator.key(other) == mutator.key(mutator.current())


def test_sampled_subnets_cover_the_widths_and_export_only_the_chosen_ops_width():
    model, mutator = build()
    rng = random.Random(0)
    seen = set()
    for _ in range(40):
        subnet = mutator.sample(rng)
        mutator.set(subnet)
        exported = mutator.active(mutator.current())
        if subnet[OP] == 'shuffle_3x3':
            seen.add(exported[WIDTH])
        else:
            assert WIDTH not in exported
        assert mutator.check(exported) == mutator.current()
    assert seen == {0.25, 0.5, 1.0}


def test_an_unknown_width_is_refused_naming_the_key(tmp_path):
    model, mutator = build()
    path = tmp_path / 'bad.yaml'
    FixedSubnet({OP: 'shuffle_3x3', WIDTH: 0.3, 'backbone.stages.0.2': 'shuffle_3x3',
                 'backbone.stages.0.2.candidates.shuffle_3x3.width': 1.0}).dump(path)
    with pytest.raises(ValueError, match=rf'{path}: {WIDTH}: 0.3 is not a choice of this '
                                         r'OneShotMutableChannel; its choices are \(0.25, 0.5'):
        fix_subnet(model, path)
    with pytest.raises(ValueError, match=f"no choice for mutable '{WIDTH}'"):
        mutator.check({OP: 'shuffle_3x3', 'backbone.stages.0.2': 'shuffle_xception'})


@pytest.mark.parametrize('width', [0.25, 0.5, 1.0])
def test_the_fixed_subnet_is_a_plain_block_of_that_width_with_the_supernets_outputs(
        tmp_path, width):
    model, mutator = build()
    subnet = {OP: 'shuffle_3x3', WIDTH: width, 'backbone.stages.0.2': 'shuffle_xception'}
    path = tmp_path / 'subnet.yaml'
    FixedSubnet(subnet).dump(path)
    assert FixedSubnet.load(path).choices == subnet  # the ratio survives YAML
    fixed = fix_subnet(model, path)
    assert remaining_mutables(fixed) == []
    block = fixed.backbone.stages[0][1]
    assert type(block) is ShuffleBlock and block.main[0].conv.out_channels == int(8 * width)
    x = torch.randn(2, 3, 16, 16)
    mutator.set(subnet)
    assert torch.allclose(model(x), fixed(x), atol=1e-5)


def test_narrower_widths_count_fewer_flops_and_train_under_spos():
    spos = SPOS(WIDTHS, input_shape=(3, 16, 16))
    flops = {}
    for width in (1.0, 0.25):  # a step of the narrow subnet trains its 2 channels only
        spos.set_subnet({OP: 'shuffle_3x3', WIDTH: width,
                         'backbone.stages.0.2': 'shuffle_xception'})
        flops[width] = spos.flops_params().flops
    assert flops[0.25] < flops[1.0]
    loss = spos(torch.randn(4, 3, 16, 16), mode='tensor').sum()
    loss.backward()
    weight = spos.architecture.backbone.stages[0][1].candidates['shuffle_3x3'].main[0].conv.weight
    assert weight.grad[:2].abs().sum() > 0 and weight.grad[2:].abs().sum() == 0


@pytest.mark.parametrize('args, message', [
    ((16, [0.5, 1.5]), r'ratio" is in \(0, 1\], got 1.5'),
    ((16, [4, 20], 'number'), r'channel count in \[1, 16\], got 20'),
    ((16, [0.5], 'percent'), "mode must be one of"),
])
def test_bad_widths_are_refused(args, message):
    with pytest.raises(ValueError, match=message):
        OneShotMutableChannel(*args)


def test_a_width_builds_from_the_registry_in_number_mode():
    width = MUTABLES.build(dict(type='OneShotMutableChannel', num_channels=16,
                                choices=[12, 4, 8], mode='number'))
    assert width.choices == (4, 8, 12) and width.current_channels == 12
