"""A budget out of reach is refused before ``data=`` is read.

Whether the width rules can meet a FLOPs or params budget does not depend on the data,
yet ``razorlib.prune`` read a generator of batches into a list (for the scores of
``taylor``, or the batch-norm re-estimation of ``l1``) before the allocation refused the
budget: the caller's generator came back with none of its 3 batches left.
"""
import pytest
import torch
import torch.nn as nn
from test_chunk_widths import CatChunk

import razorlib

X = torch.randn(1, 3, 8, 8)


def net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 24, 3), nn.ReLU(), nn.Conv2d(24, 24, 3), nn.ReLU(),
                         nn.Conv2d(24, 5, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten())


def batches(count=3, targets=(4, )):
    generator = torch.Generator().manual_seed(1)
    return [(torch.randn(4, 3, 8, 8, generator=generator),
             torch.randint(0, 4, targets, generator=generator)) for _ in range(count)]


def refusal(model, **budget):
    """The message of the allocation's own refusal: the same call with no data."""
    with pytest.raises(ValueError) as info:
        razorlib.prune(model, X, **budget)
    return str(info.value)


@pytest.mark.parametrize('budget', [dict(flops=0.0001), dict(params=0.0001)])
@pytest.mark.parametrize('importance', ['taylor', 'l1'])
def test_a_budget_out_of_reach_leaves_the_generator_unread(budget, importance):
    metric = next(iter(budget))
    expected = refusal(net(), **budget)
    assert expected.startswith(f'{metric}=0.0001 cannot be met: the smallest subnet allowed '
                               '(every group keeps a channel of each layer and chunk piece) '
                               f"keeps 0.0")
    assert expected.endswith('or lower round_to / raise max_ratio. Nothing was changed.')
    data = iter(batches())
    with pytest.raises(ValueError) as info:
        razorlib.prune(net(), X, importance=importance, data=data, **budget)
    assert str(info.value) == expected
    assert len(list(data)) == 3  # all were read before


def test_a_pruner_configs_budget_is_refused_before_the_data_too():
    data = iter(batches())
    with pytest.raises(ValueError, match='flops=0.0001 cannot be met'):
        razorlib.prune(net(), X, pruner=dict(type='ImportancePruner', flops=0.0001,
                                             importance='taylor'), data=data)
    assert len(list(data)) == 3
    data = iter(batches())
    with pytest.raises(ValueError, match='params=0.0001 cannot be met'):
        razorlib.prune(net(), X, params=0.0001, pruner='RatioPruner', data=data)
    assert len(list(data)) == 3


def test_a_latency_budget_nothing_can_meet_is_refused_before_the_data():
    data = iter(batches())
    with pytest.raises(ValueError, match=r'^latency=0.5 cannot be met: nothing can be pruned '
                       r'under the given rules \(every group keeps a channel of each layer and '
                       r'chunk piece, round_to=64\): the smallest subnet allowed is the dense '
                       r'model; lower round_to / raise max_ratio. Nothing was changed.$'):
        razorlib.prune(net(), X, latency=0.5, round_to=64, importance='taylor', data=data)
    assert len(list(data)) == 3


def test_a_group_with_parts_is_counted_at_one_channel_a_part_and_said_so():
    # the scores choose which of CatChunk's channels keep its chunk piece: before they
    # are computed its smallest cost is a bound, met exactly here
    model = CatChunk(own_chunk=True)
    data = iter(batches(targets=(4, 8, 8)))
    with pytest.raises(ValueError, match=r"^flops=0.3 cannot be met: the smallest subnet "
                       r"allowed \(.*\) keeps at least 0.5455 of the dense model's flops "
                       r"\(at least 1.54k of 2.82k, as the scores choose which channels keep "
                       r"a group's layers and chunk pieces\); ask for flops>=0.5455 or more, "
                       r'or lower round_to / raise max_ratio. Nothing was changed.$'):
        razorlib.prune(model, X, flops=0.3, importance='taylor', data=data)
    assert len(list(data)) == 3
    # the bound refuses no budget the allocation meets: the least it names passes
    slim = razorlib.prune(model, X, flops=0.5455, importance='taylor',
                          data=iter(batches(targets=(4, 8, 8))))
    assert (slim.a.out_channels, slim.b.out_channels) == (2, 2)  # of 2 and 6


@pytest.mark.parametrize('budget', [dict(flops=0.5), dict(params=0.5)])
def test_a_budget_within_reach_scores_on_the_generator_as_on_a_list(budget):
    data = iter(batches())
    slim = razorlib.prune(net(), X, importance='taylor', data=data, **budget)
    assert next(data, None) is None  # read for the scores
    from_list = razorlib.prune(net(), X, importance='taylor', data=batches(), **budget)
    widths = [m.out_channels for m in slim if isinstance(m, nn.Conv2d)]
    assert widths == [m.out_channels for m in from_list if isinstance(m, nn.Conv2d)]
    assert widths[-1] == 5 and max(widths[:2]) < 24
    with torch.no_grad():
        assert torch.equal(slim(X), from_list(X))


@pytest.mark.parametrize('budget', [dict(flops=0.0001), dict(params=0.0001)])
def test_importance_pruner_allocate_refuses_before_reading_the_generator(budget):
    pruner = razorlib.pruning.ImportancePruner(importance='taylor', **budget)
    pruner.prepare_from_supernet(net(), X)
    data = iter(batches())
    with pytest.raises(ValueError, match=f'^{next(iter(budget))}=0.0001 cannot be met'):
        pruner.allocate(data)
    assert len(list(data)) == 3
    assert pruner._scores is None  # nothing was scored


def test_check_budget_follows_a_changed_budget_and_rules():
    pruner = razorlib.pruning.ImportancePruner(flops=0.5)
    pruner.prepare_from_supernet(net(), X)
    dense = pruner.check_budget()
    assert dense.flops > 0 and dense.params > 0
    assert pruner.check_budget() is dense  # counted once
    pruner.flops = 0.0001
    with pytest.raises(ValueError, match='^flops=0.0001 cannot be met'):
        pruner.check_budget()
    pruner.flops, pruner.rule = 0.5, razorlib.pruning.WidthRule(round_to=64)
    with pytest.raises(ValueError, match=r'^flops=0.5 cannot be met: .*round_to=64'):
        pruner.check_budget()
    latency = razorlib.pruning.ImportancePruner(latency=0.5)
    latency.prepare_from_supernet(net(), X)
    assert latency.check_budget() is None


@pytest.mark.parametrize('pruner', ['ImportancePruner', 'RatioPruner'])
@pytest.mark.parametrize('budget', [dict(flops=0.5), dict(params=0.5)])
def test_the_dense_model_is_counted_once(monkeypatch, pruner, budget):
    # the reachability check before the data and the allocation after it counted the
    # dense model each
    from razorlib.pruning.allocation import SubnetMeter
    counted = []
    measure = SubnetMeter.__call__

    def spy(meter, keep, flops=True):
        if all(bool(torch.as_tensor(mask).all()) for mask in keep.values()):
            counted.append(flops)
        return measure(meter, keep, flops)

    monkeypatch.setattr(SubnetMeter, '__call__', spy)
    slim = razorlib.prune(net(), X, data=iter(batches()), pruner=pruner, **budget)
    assert counted == [True]
    assert sum(p.numel() for p in slim.parameters()) < sum(p.numel() for p in net().parameters())
    if pruner == 'ImportancePruner':  # the greedy path starts at the dense model: not again
        counted.clear()
        razorlib.prune(net(), X, data=iter(batches()), sensitivity=dict(greedy=True, steps=4),
                       **budget)
        assert counted == [True]


@pytest.mark.parametrize('greedy', [False, True])
def test_a_budget_out_of_the_sensitivity_grids_reach_is_refused_before_measuring(greedy):
    # steps=2 measures each group at half its width at narrowest: a quarter of the FLOPs
    # is out of reach whatever the losses, refused before the scores and the
    # measurement (a loss evaluation per group and step) read the generator
    data = iter(batches())
    pruner = razorlib.pruning.ImportancePruner(importance='taylor', flops=0.2,
                                               sensitivity=dict(steps=2, greedy=greedy))
    pruner.prepare_from_supernet(net(), X)
    grid = ("no narrower than the greedy path's last step" if greedy else
            'no narrower than the narrowest widths the sensitivity grid measured')
    with pytest.raises(ValueError, match=rf'^flops=0.2 cannot be met: the smallest subnet '
                       rf'allowed \(every group keeps a channel of each layer and chunk '
                       rf"piece, {grid}.*\) keeps 0.3083 of the dense model's flops "
                       r'\(33.36k of 108.19k\); ask for flops>=0.3084,'):
        pruner.allocate(data)
    assert len(list(data)) == 3 and pruner._scores is None
    pruner.flops = 0.3084  # what it names is met
    assert pruner.allocate(iter(batches())).fraction('flops') <= 0.3084
    # a grid of one step measures no width below the dense one
    one = razorlib.pruning.ImportancePruner(importance='taylor', latency=0.9,
                                            sensitivity=dict(steps=1, greedy=greedy))
    one.prepare_from_supernet(net(), X)
    data = iter(batches())
    with pytest.raises(ValueError, match=rf'^latency=0.9 cannot be met: nothing can be pruned '
                       rf'under the given rules \(.*{grid}'):
        one.allocate(data)
    assert len(list(data)) == 3


def test_the_sensitivity_grids_steps_are_checked_when_the_pruner_is_built():
    with pytest.raises(ValueError, match='^sensitivity: steps must be an integer of at least '
                       '1, got 0$'):
        razorlib.pruning.ImportancePruner(flops=0.5, sensitivity=dict(steps=0))
