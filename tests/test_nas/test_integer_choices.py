"""Integers a search space needs (kernel sizes, depths, channel counts) are refused as
floats, bools or strings, naming the module, the key and the value, in configs and in
subnet files; fractional choices (expand ratios written 6.0, width ratios) still work."""
import json

import pytest
import torch

from razorlib.nas import (DynamicMBConv, DynamicShuffleBlock, DynamicStage, FixedSubnet, NasMutator,
                          OneShotMutableChannel, OneShotMutableValue, fix_subnet)
from razorlib.registry import MODELS

MBCONV = dict(type='SearchableMobileNet', arch_setting=[(16, 2, 2)], stem_channels=8,
              first_channels=None, last_channels=None, stem='cifar')
SHUFFLE = dict(type='SearchableShuffleNetV2', arch_setting=[(16, 2, 2)], stem_channels=8,
               last_channels=None, stem='cifar')


@pytest.mark.parametrize('extra, message', [
    (dict(kernel_sizes=(3, 5.0, 7)),
     r'SearchableMobileNet: kernel_sizes\[1\] must be an integer >= 1, got 5.0 '
     r'\(a float; write 5\)'),
    (dict(kernel_sizes=(3, '5')), r"kernel_sizes\[1\] .* got '5' \(a string\)"),
    (dict(kernel_sizes=(True, 5)), r'kernel_sizes\[0\] .* got True \(a bool\)'),
    (dict(depths=[(1, 2.0)]), r'SearchableMobileNet: depths\[0\]\[1\] .* got 2.0'),
    (dict(arch_setting=[(16.0, 2, 2)]),
     r'SearchableMobileNet: arch_setting\[0\]\[0\] \(channels\) .* got 16.0'),
    (dict(arch_setting=[(16, 2.0, 2)]), r'arch_setting\[0\]\[1\] \(num_blocks\) .* got 2.0'),
    (dict(stem_channels=8.0), 'SearchableMobileNet: stem_channels .* got 8.0'),
    (dict(expand_ratios=(3, '6')),
     r"SearchableMobileNet: expand_ratios\[1\] must be a whole number >= 1, got '6'"),
    (dict(expand_ratios=(3, 4.5)), r'expand_ratios\[1\] .* got 4.5 \(a float\)'),
])
def test_the_mbconv_space_refuses_a_non_integer_before_building(extra, message, monkeypatch):
    built = []
    monkeypatch.setattr('razorlib.nas.search_spaces.mobilenet.make_stem',
                        lambda *args, **kwargs: built.append(args))
    with pytest.raises(ValueError, match=message):
        MODELS.build(dict(MBCONV, **extra))
    assert built == []  # refused before the stem (the first module) was built


@pytest.mark.parametrize('extra, message', [
    (dict(candidates=dict(k3=dict(type='ShuffleBlock', kernel_size=3),
                          k5=dict(type='ShuffleBlock', kernel_size=5.0))),
     r'SearchableShuffleNetV2: candidates.k5.kernel_size must be an integer >= 1, '
     r'got 5.0 \(a float; write 5\)'),
    (dict(candidates=dict(w=dict(type='DynamicShuffleBlock', mid_channels='8'))),
     r"candidates.w.mid_channels .* got '8' \(a string\)"),
    (dict(arch_setting=[(16, 2, 2.0)]),
     r'SearchableShuffleNetV2: arch_setting\[0\]\[2\] \(stride\) .* got 2.0'),
])
def test_the_shufflenet_space_names_the_candidate(extra, message):
    with pytest.raises(ValueError, match=message):
        MODELS.build(dict(SHUFFLE, **extra))


@pytest.mark.parametrize('cfg, message', [
    (dict(type='ShuffleBlock', in_channels=8, out_channels=16, stride=2, kernel_size=5.0),
     r'ShuffleBlock: kernel_size must be an integer >= 1, got 5.0'),
    (dict(type='ShuffleXception', in_channels=8, out_channels=8.0, stride=1),
     'ShuffleXception: out_channels .* got 8.0'),
    (dict(type='DynamicShuffleBlock', in_channels=8, out_channels=8, stride=1,
          mid_channels=4.0), 'DynamicShuffleBlock: mid_channels .* got 4.0'),
    (dict(type='MBConvBlock', in_channels=8, out_channels=8, stride=1, kernel_size=5.0),
     'MBConvBlock: kernel_size .* got 5.0'),
    (dict(type='DynamicMBConv', in_channels=8, out_channels=8, stride=1,
          kernel_sizes=(3, 5.0)), r'DynamicMBConv: kernel_sizes\[1\] .* got 5.0'),
    (dict(type='DynamicMBConv', in_channels=8, out_channels=8, stride=True),
     'DynamicMBConv: stride .* got True'),
])
def test_blocks_built_alone_name_themselves(cfg, message):
    with pytest.raises(ValueError, match=message):
        MODELS.build(cfg)


@pytest.mark.parametrize('make, message', [
    (lambda: MODELS.build(dict(MBCONV, kernel_sizes=[])),
     r'SearchableMobileNet: kernel_sizes must be a non-empty list of integers, got \[\]'),
    (lambda: MODELS.build(dict(MBCONV, expand_ratios=())),
     'SearchableMobileNet: expand_ratios must be a non-empty list of numbers'),
    (lambda: MODELS.build(dict(MBCONV, depths=[()])),
     r'SearchableMobileNet: depths\[0\] must be a non-empty list of integers'),
    (lambda: DynamicMBConv(8, 8, 1, kernel_sizes=()), 'DynamicMBConv: kernel_sizes must be'),
    (lambda: DynamicStage([]), 'DynamicStage needs at least one block'),
    (lambda: DynamicShuffleBlock(8, 8, 1, mid_ratios=()),
     'OneShotMutableChannel of 4 channels needs at least one choice'),
    (lambda: OneShotMutableValue([]), 'OneShotMutableValue needs at least one choice'),
])
def test_an_empty_list_of_choices_is_refused_by_name(make, message):
    """A mutable needs a choice; an empty list (``kernel_sizes=[]`` in a config) used to
    fail as a bare ``IndexError: list index out of range`` naming nothing."""
    with pytest.raises(ValueError, match=message):
        make()


def test_depths_and_channel_counts_are_integers():
    with pytest.raises(ValueError, match=r'DynamicStage: depths\[1\] .* got 2.0'):
        DynamicStage([torch.nn.Identity()] * 3, depths=(1, 2.0))
    with pytest.raises(ValueError, match=r'OneShotMutableChannel of 16 channels: choices\[1\]'
                                         r': .* integer channel count in \[1, 16\], got 8.0'):
        OneShotMutableChannel(16, [4, 8.0], mode='number')


def test_fractional_choices_still_work():
    block = DynamicMBConv(8, 8, 1, kernel_sizes=(3, 5), expand_ratios=(3.0, 6)).eval()
    assert block.expand_ratio.choices == (3.0, 6)
    block.expand_ratio.current_choice = 3  # an int names the float choice 3.0
    assert block.expand_ratio.current_choice == 3.0
    assert isinstance(block.expand_ratio.current_choice, float)
    x = torch.randn(1, 8, 5, 5)
    assert torch.allclose(block(x), block.to_static().eval()(x), atol=1e-6)
    width = OneShotMutableChannel(16, [0.5, 1])  # ratios: 1 and 1.0 are one ratio
    width.current_choice = 1.0
    assert width.current_channels == 16 and width.current_choice == 1
    value = OneShotMutableValue([0.5, 1.5])
    value.current_choice = 1.5
    assert value.current_choice == 1.5
    ratio = DynamicMBConv(8, 8, 1, kernel_sizes=(3, 5), expand_ratios=(3, 6)).expand_ratio
    ratio.current_choice = 6.0  # an expand ratio is not an integer choice: 6.0 names 6
    assert ratio.current_choice == 6 and isinstance(ratio.current_choice, int)


@pytest.mark.parametrize('ratios', [(3, 6.0), (3.0, 6.0)])
def test_a_largest_expand_ratio_written_as_a_float_builds_and_runs(ratios):
    block = DynamicMBConv(8, 8, 1, kernel_sizes=(3, 5), expand_ratios=ratios).eval()
    assert block.expand.conv.out_channels == 48
    block.expand_ratio.current_choice = 6.0
    x = torch.randn(1, 8, 5, 5)
    assert torch.allclose(block(x), block.to_static().eval()(x), atol=1e-6)


def test_a_float_for_an_integer_choice_is_refused_by_name():
    with pytest.raises(ValueError, match=r'OneShotMutableValue: choices\[1\] must be an '
                                         r'integer, got 5.0 \(a float; write 5\)'):
        OneShotMutableValue([3, 5.0], integer=True)
    block = DynamicMBConv(8, 8, 1, kernel_sizes=(3, 5))
    assert block.kernel_size.integer and not block.expand_ratio.integer
    assert DynamicStage([torch.nn.Identity()] * 2).depth.integer
    assert OneShotMutableChannel(16, [8, 16], mode='number').integer
    assert not OneShotMutableChannel(16, [0.5, 1.0]).integer
    value = OneShotMutableValue([3, 5, 7], integer=True)
    with pytest.raises(ValueError, match=r'5.0 is not a choice of this OneShotMutableValue; '
                                         r'its choices are \(3, 5, 7\), integers: write 5, '
                                         r'not 5.0'):
        value.current_choice = 5.0
    assert value.current_choice == 7
    with pytest.raises(ValueError, match="'5' is not a choice"):
        value.current_choice = '5'


@pytest.mark.parametrize('suffix', ['.yaml', '.json'])
def test_a_subnet_file_with_a_float_kernel_is_refused(tmp_path, suffix):
    net = MODELS.build(dict(MBCONV, depths=[(1, 2)]))
    choices = {'stages.0.depth': 2, 'stages.0.blocks.0.kernel_size': 5.0,
               'stages.0.blocks.0.expand_ratio': 3, 'stages.0.blocks.1': 'skip'}
    path = tmp_path / f'subnet{suffix}'
    path.write_text(json.dumps(choices))  # JSON is YAML too; keeps 5.0 a float
    assert FixedSubnet.load(path).choices['stages.0.blocks.0.kernel_size'] == 5.0
    before = NasMutator(net).current()
    with pytest.raises(ValueError, match=rf'{path.name}: stages.0.blocks.0.kernel_size: 5.0 is '
                                         r'not a choice .* write 5, not 5.0'):
        fix_subnet(net, path, inplace=True)
    assert NasMutator(net).current() == before  # nothing was set
    for value, message in ((2.0, 'stages.0.depth: 2.0 is not a choice'),
                           (True, 'stages.0.depth: True is not a choice')):
        with pytest.raises(ValueError, match=message):
            NasMutator(net).check(dict(choices, **{'stages.0.blocks.0.kernel_size': 5,
                                                   'stages.0.depth': value}))
    fixed = fix_subnet(net, dict(choices, **{'stages.0.blocks.0.kernel_size': 5}))
    assert fixed.stages[0][0].depthwise.conv.kernel_size == (5, 5)


def test_check_returns_the_mutables_own_choices():
    net = MODELS.build(dict(SHUFFLE, candidates=dict(
        w=dict(type='DynamicShuffleBlock', mid_ratios=(0.5, 1.0)))))
    mutator = NasMutator(net)
    checked = mutator.check({'stages.0.0': 'w', 'stages.0.0.candidates.w.width': 1,
                             'stages.0.1': 'w', 'stages.0.1.candidates.w.width': 0.5})
    assert checked['stages.0.0.candidates.w.width'] == 1.0
    assert isinstance(checked['stages.0.0.candidates.w.width'], float)


@pytest.mark.parametrize('make', [
    lambda: DynamicMBConv(8, 8, 1, kernel_sizes=(3, 5), expand_ratios=(3, 6)),
    lambda: DynamicShuffleBlock(8, 16, 2, kernel_size=3, mid_ratios=(0.5, 1.0)),
])
def test_a_fixed_block_keeps_the_supernets_norm_settings_dtype_and_device(make):
    torch.manual_seed(0)
    block = make().double()
    for bn in block.modules():
        if isinstance(bn, torch.nn.BatchNorm2d):
            bn.eps, bn.momentum = 1e-3, None  # a cumulative average
    x = torch.randn(2, 8, 6, 6, dtype=torch.float64)
    static = block.to_static()
    assert all((bn.eps, bn.momentum) == (1e-3, None) for bn in static.modules()
               if isinstance(bn, torch.nn.BatchNorm2d))
    assert torch.allclose(block.eval()(x), static.eval()(x), atol=1e-12)
    block.train()(x), static.train()(x)  # the same running statistics after a step
    assert torch.allclose(block.eval()(x), static.eval()(x), atol=1e-12)
