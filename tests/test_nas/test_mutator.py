"""NasMutator: lists, samples (own generator only), sets, exports and checks choices."""
import itertools
import random

import pytest
import torch.nn as nn

from razorlib.nas import (NasMutator, OneShotMutableOP, SearchableMobileNet, SearchableShuffleNetV2,
                          fix_subnet)
from razorlib.utils.complexity import count_params


def shufflenet() -> nn.Module:
    return SearchableShuffleNetV2(arch_setting=[(16, 2, 2), (32, 2, 2)], stem_channels=8,
                                  stem='cifar', last_channels=None)


def mobilenet() -> nn.Module:
    return SearchableMobileNet(arch_setting=[(16, 3, 2)], stem_channels=8, first_channels=None,
                               last_channels=None, stem='cifar', depths=[(2, 3)])


def test_lists_every_mutable_with_its_choices_cheapest_first():
    mutator = NasMutator(shufflenet())
    assert list(mutator.choices) == ['stages.0.0', 'stages.0.1', 'stages.1.0', 'stages.1.1']
    for choices in mutator.choices.values():
        assert sorted(choices) == sorted(['shuffle_3x3', 'shuffle_5x5', 'shuffle_7x7',
                                          'shuffle_xception'])
        assert choices[0] == 'shuffle_3x3'
    assert mutator.sizes == {key: 4 for key in mutator.choices}


def test_sampling_is_seeded_and_leaves_the_global_generator_alone():
    mutator = NasMutator(mobilenet())
    random.seed(123)
    state = random.getstate()
    first = [mutator.sample(random.Random(5)) for _ in range(3)]
    assert first == [mutator.sample(random.Random(5)) for _ in range(3)]
    assert random.getstate() == state
    rng = random.Random(0)
    assert len({mutator.key(mutator.sample(rng)) for _ in range(30)}) > 10


def test_set_then_export_round_trips_and_moves_keep_valid_choices():
    model = mobilenet()
    mutator = NasMutator(model)
    rng = random.Random(1)
    subnet = mutator.sample(rng)
    mutator.set(subnet)
    assert mutator.current() == subnet
    assert model.stages[0].depth.current_choice == subnet['stages.0.depth']
    for moved in (mutator.mutate(subnet, 1.0, rng), mutator.crossover(subnet, mutator.min_subnet(),
                                                                      rng)):
        assert mutator.check(moved) == moved


def test_conditional_mutables_only_count_when_active():
    mutator = NasMutator(mobilenet())
    conditions = {key: [c.key for c in conds] for key, conds in mutator.conditions.items()}
    assert conditions['stages.0.blocks.2'] == ['stages.0.depth']
    assert conditions['stages.0.blocks.2.candidates.mbconv.kernel_size'] == [
        'stages.0.depth', 'stages.0.blocks.2']
    base = mutator.max_subnet()
    skipped = dict(base, **{'stages.0.blocks.1': 'skip'})
    other_kernel = dict(skipped, **{'stages.0.blocks.1.candidates.mbconv.kernel_size': 3})
    assert mutator.key(skipped) == mutator.key(other_kernel) != mutator.key(base)
    active = mutator.active(skipped)
    assert 'stages.0.blocks.1.candidates.mbconv.kernel_size' not in active
    # a subnet may leave inactive mutables out, but not active ones
    shallow = {k: v for k, v in mutator.min_subnet().items()
               if not k.startswith('stages.0.blocks.2')}
    assert mutator.check(shallow)['stages.0.depth'] == 2
    with pytest.raises(ValueError, match="no choice for mutable 'stages.0.blocks.2'"):
        mutator.check(dict(shallow, **{'stages.0.depth': 3}))


def test_check_names_the_unknown_key_or_choice():
    mutator = NasMutator(shufflenet())
    good = mutator.min_subnet()
    with pytest.raises(ValueError, match=r"net.yaml: unknown mutable 'stages.9.0'"):
        mutator.check(dict(good, **{'stages.9.0': 'shuffle_3x3'}), where='net.yaml')
    with pytest.raises(ValueError, match=r"net.yaml: stages.1.0: 'shuffle_9x9' is not a choice"):
        mutator.check(dict(good, **{'stages.1.0': 'shuffle_9x9'}), where='net.yaml')
    # was "'list' object has no attribute 'items'"
    with pytest.raises(TypeError, match='net.yaml: a subnet is a dict of mutable name -> '
                       'choice, got list'):
        mutator.check(list(good.items()), where='net.yaml')


def test_fair_samples_use_every_choice_of_every_mutable_once():
    mutator = NasMutator(mobilenet())
    samples = mutator.fair_samples(random.Random(0))
    assert len(samples) == max(mutator.sizes.values()) == 3
    for key, choices in mutator.choices.items():
        assert set(choices) <= {s[key] for s in samples}


def test_min_and_max_subnet_are_each_mutables_first_and_last_choice_not_the_cheapest():
    """Ops are ordered by their parameters at full inner width, so with a width nested in
    an op the first choices need not be the cheapest subnet (as the docstring says)."""
    net = SearchableShuffleNetV2(
        arch_setting=[(32, 2, 2)], stem_channels=16, last_channels=None, stem='cifar',
        candidates=dict(shuffle_7x7=dict(type='DynamicShuffleBlock', kernel_size=7,
                                         mid_ratios=(0.25, 1.0)),
                        shuffle_xception=dict(type='ShuffleXception')))
    mutator = NasMutator(net)
    assert mutator.min_subnet() == {key: choices[0] for key, choices in mutator.choices.items()}
    assert mutator.max_subnet() == {key: choices[-1] for key, choices in mutator.choices.items()}
    assert mutator.min_subnet()['stages.0.0'] == 'shuffle_xception'
    narrow = {key: 'shuffle_7x7' if value == 'shuffle_xception' else 0.25 if key.endswith('width')
              else value for key, value in mutator.min_subnet().items()}
    assert count_params(fix_subnet(net, mutator.active(narrow))) < \
        count_params(fix_subnet(net, mutator.active(mutator.min_subnet())))


def all_subnets(mutator: NasMutator) -> list:
    return [dict(zip(mutator.choices, values))
            for values in itertools.product(*mutator.choices.values())]


WIDTHS_IN_OPS = dict(  # shuffle_7x7 has more parameters at full width, fewer at 0.25
    arch_setting=[(32, 2, 2)], stem_channels=16, last_channels=None, stem='cifar',
    candidates=dict(shuffle_7x7=dict(type='DynamicShuffleBlock', kernel_size=7,
                                     mid_ratios=(0.25, 1.0)),
                    shuffle_xception=dict(type='ShuffleXception')))
SEVEN = 'candidates.shuffle_7x7.width'


@pytest.mark.parametrize('net, expected', [
    (lambda: SearchableShuffleNetV2(**WIDTHS_IN_OPS),
     {'stages.0.0': 'shuffle_7x7', f'stages.0.0.{SEVEN}': 0.25,
      'stages.0.1': 'shuffle_7x7', f'stages.0.1.{SEVEN}': 0.25}),
    (lambda: SearchableMobileNet(arch_setting=[(16, 3, 2)], stem_channels=8,
                                 first_channels=None, last_channels=None, stem='cifar',
                                 kernel_sizes=(3, 5), expand_ratios=(3, ), depths=[(2, 3)]),
     {'stages.0.depth': 2, 'stages.0.blocks.0.kernel_size': 3,
      'stages.0.blocks.0.expand_ratio': 3, 'stages.0.blocks.1': 'skip'}),
], ids=['widths_in_ops', 'ops_in_a_dynamic_stage'])
def test_cheapest_is_the_least_cost_of_every_subnet_with_one_cost_per_op_choice(net, expected):
    net = net()
    mutator = NasMutator(net)

    def params(choices):
        return count_params(fix_subnet(net, mutator.active(choices)))

    calls = []
    cheapest = mutator.cheapest(lambda choices: calls.append(1) or params(choices))
    assert mutator.active(cheapest) == expected
    assert params(cheapest) == min(params(choices) for choices in all_subnets(mutator))
    ops = [key for key, choices in mutator.choices.items() if isinstance(choices[0], str)]
    assert len(calls) == sum(len(mutator.choices[key]) for key in ops)


def test_cheapest_passes_over_ops_in_blocks_that_no_depth_runs():
    """A stage of three blocks whose depths are (1, 2) never runs its third block, so no
    subnet measures that block's op: ``cheapest`` used to stop with a bare StopIteration
    looking for a depth that runs it (from the search's constraint check and
    ``tools/get_flops.py``); it now leaves that op alone and finds the cheapest subnet."""
    net = SearchableMobileNet(arch_setting=[(16, 3, 2)], stem_channels=8, first_channels=None,
                              last_channels=None, stem='cifar', kernel_sizes=(3, 5),
                              expand_ratios=(3, ), depths=[(1, 2)])
    mutator = NasMutator(net)
    assert not mutator.reachable('stages.0.blocks.2')
    assert mutator.reachable('stages.0.blocks.1')

    def params(choices):
        return count_params(fix_subnet(net, mutator.active(choices)))

    cheapest = mutator.cheapest(params)
    assert mutator.active(cheapest) == {'stages.0.depth': 1, 'stages.0.blocks.0.kernel_size': 3,
                                        'stages.0.blocks.0.expand_ratio': 3}
    assert params(cheapest) == min(params(choices) for choices in all_subnets(mutator))


@pytest.mark.parametrize('make, first, again', [
    (lambda op: nn.Sequential(nn.Sequential(op), nn.Sequential(op)), '0.0', '1.0'),
    (lambda op: nn.Sequential(op, op), '0', '1'),
])
def test_a_mutable_held_at_two_places_is_refused_naming_both(make, first, again):
    """One mutable module at two places takes one choice, but the mutator listed it under
    each name: a subnet {'0.0': 'conv', '1.0': 'skip'} was accepted and the network ran
    (and fixed to) 'skip' at both places, the 'conv' choice dropped silently; held twice
    by one parent, ``fix_subnet`` failed calling it a module type nothing resolves."""
    op = OneShotMutableOP(dict(conv=nn.Conv2d(2, 2, 1), skip=nn.Identity()))
    with pytest.raises(ValueError, match=rf"'{again}' is the mutable '{first}' again \(one "
                                         r'OneShotMutableOP at two places\)'):
        NasMutator(make(op))


def test_moves_name_every_missing_or_unknown_key_before_drawing():
    """``mutate`` and ``crossover`` failed on a subnet leaving a mutable out with a bare
    KeyError ('stages.0.1'), and took unknown keys silently; ``active`` (and so ``key``)
    failed on unknown keys with a bare KeyError.  Each now names every bad key, and the
    moves fail before drawing from their generator."""
    mutator = NasMutator(shufflenet())
    good = mutator.min_subnet()
    rng = random.Random(0)
    state = rng.getstate()
    incomplete = {'stages.0.0': 'shuffle_3x3', 'stages.1.0': 'shuffle_3x3'}
    with pytest.raises(ValueError) as err:
        mutator.mutate(incomplete, 0.5, rng)
    assert str(err.value) == (
        f"mutate: no choice for mutables 'stages.0.1' (one of {mutator.choices['stages.0.1']}), "
        f"'stages.1.1' (one of {mutator.choices['stages.1.1']})")
    known = "this model has 4 mutables: ['stages.0.0', 'stages.0.1', 'stages.1.0', 'stages.1.1']"
    with pytest.raises(ValueError) as err:
        mutator.mutate(dict(good, **{'stages.9.0': 'shuffle_3x3', 'head': 1}), 0.5, rng)
    assert str(err.value) == f"mutate: unknown mutables 'stages.9.0', 'head'; {known}"
    partial = {key: value for key, value in good.items() if key != 'stages.1.0'}
    with pytest.raises(ValueError) as err:
        mutator.crossover(good, partial, rng)
    assert str(err.value) == ("crossover: second: no choice for mutable 'stages.1.0' (one of "
                              f"{mutator.choices['stages.1.0']})")
    with pytest.raises(ValueError) as err:
        mutator.crossover(dict(good, extra=1), good, rng)
    assert str(err.value) == f"crossover: first: unknown mutable 'extra'; {known}"
    assert rng.getstate() == state
    for method in (mutator.active, mutator.key):
        with pytest.raises(ValueError) as err:
            method(dict(good, extra=1))
        assert str(err.value) == f"subnet: unknown mutable 'extra'; {known}"


def test_moves_take_an_exported_subnet_without_its_inactive_mutables():
    """A subnet need not name inactive mutables (an exported one leaves them out): the
    moves complete it as ``check`` does, and still refuse an active one left out."""
    mutator = NasMutator(mobilenet())
    exported = mutator.active(mutator.min_subnet())
    assert 'stages.0.blocks.2' not in exported
    completed = mutator.check(exported)
    assert mutator.mutate(exported, 0.0, random.Random(0)) == completed
    assert mutator.crossover(exported, exported, random.Random(0)) == completed
    # the op of the third block is named, not the mutables inside it, which it decides
    deeper = dict(exported, **{'stages.0.depth': 3})
    with pytest.raises(ValueError) as err:
        mutator.mutate(deeper, 0.0, random.Random(0))
    assert str(err.value) == ("mutate: no choice for mutable 'stages.0.blocks.2' (one of "
                              "['skip', 'mbconv'])")
