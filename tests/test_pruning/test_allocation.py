"""Allocation to a budget: local vs global ranking, round_to, max_ratio, FLOPs/params
budgets met exactly as counted after slicing, unreachable budgets refused untouched."""
import copy
import re

import numpy as np
import pytest
import torch
import torch.nn as nn
import zoo

import razorlib
from razorlib.pruning import ImportancePruner, RatioPruner, WidthRule, allocate
from razorlib.tracing import ChannelGroup
from razorlib.utils import get_model_complexity

X = torch.randn(1, 4)


def mlp():
    """fc1 (4 -> 8) -> fc2 (8 -> 8) -> fc3 (8 -> 2): groups '0' and '2' of 8 channels."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(),
                         nn.Linear(8, 2)).eval()


def prepared(model=None, x=X, **kwargs):
    pruner = ImportancePruner(**kwargs)
    pruner.prepare_from_supernet(mlp() if model is None else model, x)
    return pruner


# Group '0' has equal scores; group '2' one strong channel and seven weak ones.
SCORES = {'0': np.ones(8), '2': np.array([8.] + [0.1] * 7)}


def kept(allocation):
    return {gid: count for gid, (count, _) in allocation.kept.items()}


def test_local_keeps_the_ratio_of_each_group_global_ranks_all_channels_together():
    pruner = prepared()
    local = allocate(pruner, SCORES, ratio=0.5)
    assert kept(local) == {'0': 4, '2': 4} and local.ratio == 0.5
    ranked = allocate(pruner, SCORES, ratio=0.5, global_ranking=True)
    # the best 8 of 16: group 2's strong channel and seven of group 0's
    assert kept(ranked) == {'0': 7, '2': 1}
    assert ranked.subnet['2'].nonzero()[0].tolist() == [0]


def test_global_ranking_differs_from_local_on_a_real_criterion():
    model = mlp()
    with torch.no_grad():  # group '2' (fc2's rows, fc3's columns) outweighs group '0'
        model[4].weight.mul_(100)
    local = prepared(copy.deepcopy(model), importance=dict(type='l1', normalize='none'))
    ranked = prepared(copy.deepcopy(model), importance=dict(type='l1', normalize='none'),
                      global_ranking=True)
    assert kept(local.allocate()) == {'0': 4, '2': 4}
    assert kept(ranked.allocate()) == {'0': 1, '2': 7}  # at most half of the 16


def test_equal_scores_across_groups_prune_every_group_alike():
    pruner = prepared()
    flat = allocate(pruner, {'0': np.ones(8), '2': np.ones(8)}, ratio=0.5, global_ranking=True)
    assert kept(flat) == {'0': 4, '2': 4}


def test_max_ratio_caps_what_one_group_loses():
    pruner = prepared()
    capped = allocate(pruner, SCORES, ratio=0.5, global_ranking=True, max_ratio=0.5)
    # group 2 may lose half, no more, and the 8 of 16 channels asked hold: group 0 gives
    # up the rest (it kept 7 once, 11 channels in all)
    assert kept(capped) == {'0': 4, '2': 4}
    assert WidthRule(max_ratio=0.75).allowed(ChannelGroup('g', 10, 10)).tolist() == \
        list(range(3, 11))


def test_round_to_keeps_multiples_or_the_full_width():
    rule = WidthRule(round_to=4)
    group = ChannelGroup('g', 10, 10)
    assert rule.allowed(group).tolist() == [4, 8, 10]
    assert [rule.fit(group, c) for c in (0, 5, 6, 9, 10)] == [4, 4, 8, 10, 10]
    # a group conv binding 4 layer channels into one: its widths step by 4 already
    assert WidthRule(round_to=8).allowed(ChannelGroup('g', 4, 16)).tolist() == [2, 4]
    pruner = prepared()
    assert kept(allocate(pruner, SCORES, ratio=0.3, round_to=4)) == {'0': 4, '2': 4}


def test_flops_and_params_budgets_are_met_as_counted_after_slicing():
    torch.manual_seed(0)
    model = zoo.ResNetBasic().eval()
    x = torch.randn(1, 3, 32, 32)
    dense = get_model_complexity(model, x)
    # this net's groups are small (16 and 32 channels), so the candidates move in coarse
    # steps: one ratio for every group reaches 0.45 of the FLOPs below 0.5 (the next
    # step is 0.53); two channels more of the stem's residual group cost 4% of the FLOPs
    for budget, global_ranking, closest in ((dict(flops=0.5), False, 0.45),
                                            (dict(flops=0.3), True, 0.27),
                                            (dict(params=0.4), False, 0.37),
                                            (dict(params=0.4), True, 0.39)):
        metric, target = next(iter(budget.items()))
        supernet = copy.deepcopy(model)
        round_to = 2 if global_ranking else 1
        pruner = ImportancePruner(global_ranking=global_ranking, round_to=round_to, **budget)
        pruner.prepare_from_supernet(supernet, x)
        allocation = pruner.allocate()
        pruner.set_subnet(allocation.subnet)
        slim = pruner.deploy_subnet(supernet, pruner.export_subnet())
        achieved = getattr(get_model_complexity(slim, x), metric) / getattr(dense, metric)
        assert achieved == pytest.approx(allocation.fraction(metric), abs=1e-12)
        assert closest <= achieved <= target, (budget, global_ranking, achieved)
        widths = [m.out_channels for m in slim.modules() if isinstance(m, nn.Conv2d)]
        assert all(w % round_to == 0 for w in widths), widths


def test_an_unreachable_budget_names_the_best_value_and_changes_nothing():
    torch.manual_seed(0)
    model = zoo.ResNetBasic().eval()
    x = torch.randn(1, 3, 32, 32)
    pruner = ImportancePruner(flops=0.05, max_ratio=0.5)
    pruner.prepare_from_supernet(model, x)
    with torch.no_grad():
        before = model(x)
    masks = {k: v.clone() for k, v in model.state_dict().items() if k.endswith('mask')}
    with pytest.raises(ValueError) as info:
        pruner.allocate()
    message = str(info.value)
    assert 'flops=0.05 cannot be met' in message and 'max_ratio=0.5' in message
    best = float(re.search(r'keeps ([0-9.]+) of the dense', message)[1])
    assert 0.2 < best < 0.3  # every group keeps half: about a quarter of the FLOPs
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in masks.items())
    assert all(keep.all() for keep in pruner.current_subnet.values())
    with torch.no_grad():
        assert torch.equal(model(x), before)
    assert ImportancePruner(flops=best + 1e-3, max_ratio=0.5)  # reachable just above


def test_a_pruner_ranking_by_position_allocates_locally_only():
    model = mlp()
    pruner = RatioPruner()
    pruner.prepare_from_supernet(model, X)
    allocation = allocate(pruner, ratio=0.25)
    assert all(keep.nonzero()[0].tolist() == [0, 1] for keep in allocation.subnet.values())
    flops = allocate(pruner, flops=0.5, example_inputs=X)
    assert flops.fraction('flops') <= 0.5
    with pytest.raises(ValueError, match='global ranking needs an importance criterion'):
        allocate(pruner, ratio=0.5, global_ranking=True)


def test_budgets_are_checked():
    with pytest.raises(ValueError, match='give one budget'):
        ImportancePruner(ratio=0.5, flops=0.5)
    with pytest.raises(ValueError, match=r'flops is a fraction of the dense model in \(0, 1\]'):
        ImportancePruner(flops=1.5)
    with pytest.raises(ValueError, match='round_to must be a positive integer'):
        WidthRule(round_to=0)
    with pytest.raises(ValueError, match='max_ratio is the largest fraction'):
        WidthRule(max_ratio=1.0)


def test_sample_subnet_obeys_round_to_and_max_ratio():
    pruner = prepared(ratio=(0.1, 0.3), round_to=4, max_ratio=0.5)
    for _ in range(5):
        assert all(int(keep.sum()) in (4, 8) for keep in pruner.sample_subnet().values())


class ConcatHalves(nn.Module):
    """Three 2-channel convs and a 6-channel one concatenated, halved and added: a group of
    6 channels with three parts (the three small convs), each keeping one channel."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = (nn.Conv2d(3, 2, 3, padding=1) for _ in range(3))
        self.d, self.head = nn.Conv2d(3, 6, 3, padding=1), nn.Conv2d(6, 4, 1)

    def forward(self, x):
        u, v = torch.cat([self.a(x), self.b(x), self.c(x), self.d(x)], 1).chunk(2, 1)
        return self.head(u + v)


@pytest.mark.parametrize('budget', [dict(ratio=0.3), dict(flops=0.7, global_ranking=True)])
def test_round_to_holds_where_a_group_needs_a_channel_per_part(budget):
    torch.manual_seed(0)
    x = torch.randn(1, 3, 8, 8)
    slim = razorlib.prune(ConcatHalves().eval(), x, round_to=2, **budget)
    assert slim.d.out_channels == 4  # 2 would leave a part without a channel: 3 were kept
    with pytest.raises(ValueError, match=r'flops=0.2 cannot be met: .* keeps 0.6667'):
        razorlib.prune(ConcatHalves().eval(), x, flops=0.2, round_to=2)


def test_a_budget_at_a_subnets_exact_fraction_takes_it():
    """0.58 * 50 and 0.82 * 150 fall just below 29 and 123 in float: the subnets that cost
    exactly those fractions meet the budget (one was refused, the other passed over)."""
    torch.manual_seed(0)
    tiny = nn.Sequential(nn.Linear(12, 2), nn.ReLU(), nn.Linear(2, 8))  # 50 params
    slim = razorlib.prune(tiny, torch.randn(1, 12), params=0.58)
    assert sum(p.numel() for p in slim.parameters()) == 29
    net = nn.Sequential(nn.Linear(11, 5), nn.ReLU(), nn.Linear(5, 15))  # 150 params
    slim = razorlib.prune(net, torch.randn(1, 11), params=0.82)
    assert slim[0].out_features == 4 and sum(p.numel() for p in slim.parameters()) == 123


def test_a_local_ratio_on_a_tie_keeps_the_larger_width():
    net = nn.Sequential(nn.Conv2d(3, 45, 1), nn.ReLU(), nn.Conv2d(45, 4, 1))
    x = torch.randn(1, 3, 8, 8)
    assert razorlib.prune(net, x, ratio=0.7)[0].out_channels == 32  # 31.5, not 31.4999...
    assert razorlib.prune(net, x, ratio=0.5)[0].out_channels == 23


@pytest.mark.parametrize('importance', ['taylor', 'fisher'])
def test_a_data_criterion_on_a_model_without_prunable_groups_keeps_it_whole(importance):
    net = nn.Sequential(nn.Linear(8, 4))  # its only output is the model's
    data = [(torch.randn(4, 8), torch.randint(0, 4, (4, )))]
    with pytest.warns(UserWarning, match='nothing was pruned'):
        slim = razorlib.prune(net, torch.randn(2, 8), ratio=0.5, importance=importance,
                              data=data)
    assert slim[0].out_features == 4
