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
from razorlib.pruning.allocation import _Family
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


def test_global_ranking_gives_what_its_top_leaves_of_a_budget_to_the_next_that_fit():
    """fc1 (16 -> 4) -> fc2 (4 -> 8) -> fc3 (8 -> 2), no biases: ``k0`` and ``k1`` kept
    channels cost ``16 k0 + k0 k1 + 2 k1`` of 112 FLOPs.  The best 8 channels (group 0's
    two, group 1's six) cost 56; group 0's third, next in the ranking, would cost 78, over
    ``flops=0.55`` (61.6).  Group 1's seventh, ranked after it, fits (60); its eighth does
    not (64)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 4, bias=False), nn.Linear(4, 8, bias=False),
                          nn.Linear(8, 2, bias=False)).eval()
    x = torch.randn(1, 16)
    pruner = prepared(model, x)
    scores = {'0': np.array([10., 9, 2, 1]), '1': np.array([8., 7, 6, 5, 4, 3, 0.5, 0.4])}
    top = allocate(pruner, scores, flops=0.5, global_ranking=True, example_inputs=x)
    assert kept(top) == {'0': 2, '1': 6} and top.pruned.flops == 56
    filled = allocate(pruner, scores, flops=0.55, global_ranking=True, example_inputs=x)
    assert kept(filled) == {'0': 2, '1': 7} and filled.pruned.flops == 60
    assert filled.subnet['1'].nonzero()[0].tolist() == list(range(7))  # its best seven
    # a ratio budget counts channels: the best 9 of 12 are the top of the ranking
    assert kept(allocate(pruner, scores, ratio=0.75, global_ranking=True)) == {'0': 3, '1': 6}


def test_the_fill_counts_nothing_more_where_the_top_leaves_under_the_slack():
    """Each group the fill tries is a FLOPs count (a forward); a remainder under
    ``FILL_SLACK`` of the budget is left, so the top's own count is the only one."""
    from razorlib.pruning.allocation import FILL_SLACK, _filled
    family = _Family([ChannelGroup('a', 4, 4), ChannelGroup('b', 4, 4)],
                     {'a': np.array([9., 8, 1, 0]), 'b': np.array([7., 6, 5, 4])},
                     WidthRule(), global_ranking=True)
    counted = []

    def cost(counts):
        counted.append(dict(counts))
        return 5 * counts['a'] + counts['b']  # the best three (a: 2, b: 1) cost 11
    assert _filled(family, 3, cost, limit=11 / (1 - FILL_SLACK / 2)) == {'a': 2, 'b': 1}
    assert counted == [{'a': 2, 'b': 1}]
    assert _filled(family, 3, cost, limit=14) == {'a': 2, 'b': 4}  # 21% left: filled
    assert len(counted) > 2


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


@pytest.mark.parametrize('budget', [dict(flops=0.5), dict(params=0.5)])
@pytest.mark.parametrize('allocation, times', [
    (dict(global_ranking=False), 1), (dict(global_ranking=True), 1),
    # the path starts at the dense model check_budget counted for the budget (was twice)
    (dict(sensitivity=dict(greedy=True, steps=4)), 1),
])
def test_a_budget_counts_the_dense_model_once(budget, allocation, times, dense_counts):
    x = torch.randn(1, 3, 32, 32)
    pruner = prepared(zoo.ResNetBasic().eval(), x, **allocation, **budget)
    data = [(x, torch.zeros(1, dtype=torch.long))] if 'sensitivity' in allocation else None
    chosen = pruner.allocate(data)
    assert sum(dense_counts) == times and len(dense_counts) > 2
    assert chosen.fraction(next(iter(budget))) <= 0.5


@pytest.mark.parametrize('metric', ['flops', 'params'])
def test_a_whole_budget_keeps_the_dense_model_counted_once(metric, dense_counts):
    x = torch.randn(1, 3, 32, 32)
    pruner = prepared(zoo.ResNetBasic().eval(), x, **{metric: 1.0})
    chosen = pruner.allocate()
    assert all(count == whole for count, whole in chosen.kept.values())
    assert chosen.pruned == chosen.dense and chosen.fraction(metric) == 1.0
    assert sum(dense_counts) == 1
    full = get_model_complexity(zoo.ResNetBasic().eval(), x)
    assert (chosen.pruned.flops, chosen.pruned.params) == (full.flops, full.params)


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


@pytest.mark.parametrize('budget', [dict(flops=0.7), dict(flops=0.7, global_ranking=True)])
def test_round_to_holds_where_a_group_needs_a_channel_per_part(budget):
    torch.manual_seed(0)
    x = torch.randn(1, 3, 8, 8)
    slim = razorlib.prune(ConcatHalves().eval(), x, round_to=2, **budget)
    assert slim.d.out_channels == 4  # 2 would leave a part without a channel: 3 were kept
    with pytest.raises(ValueError, match=r'flops=0.2 cannot be met: .* keeps 0.6667'):
        razorlib.prune(ConcatHalves().eval(), x, flops=0.2, round_to=2)
    # 0.3 of 6 channels rounds to 2, which the parts forbid: 4, the floor, is kept
    assert razorlib.prune(ConcatHalves().eval(), x, ratio=0.3, round_to=2).d.out_channels == 4


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


# ------------------------------------------------------------ a common ratio (local)
def four_and_nine():
    """Groups '0' (4 channels) and '2' (9).  With round_to=2 a common ratio keeps 2 or 4
    of '0' (4 from the ratio 3/4 on) and 2, 4, 6, 8 or 9 of '2' (from 3/9, 5/9, 7/9 and
    8.5/9 on)."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(),
                         nn.Conv2d(4, 9, 3, padding=1), nn.ReLU(), nn.Conv2d(9, 2, 1),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten())


def test_a_local_flops_budget_reaches_every_subnet_a_common_ratio_keeps():
    # (4, 6), kept by the ratios from 3/4 to 7/9, costs 0.7467 of the FLOPs and (4, 8)
    # 0.9156: the candidates, halfway between breakpoints of round(ratio * channels),
    # skipped (4, 6) and flops=0.8311 kept (2, 6), 0.3867
    x = torch.randn(1, 3, 8, 8)
    pruner = ImportancePruner(flops=0.8311, round_to=2)
    pruner.prepare_from_supernet(four_and_nine(), x)
    allocation = pruner.allocate()
    assert kept(allocation) == {'0': 4, '2': 6}
    assert allocation.ratio == 0.75  # the least common ratio that keeps it
    assert kept(allocate(pruner, ratio=0.75, round_to=2)) == {'0': 4, '2': 6}


@pytest.mark.parametrize('rule', [WidthRule(), WidthRule(round_to=2), WidthRule(round_to=4),
                                  WidthRule(round_to=3, max_ratio=0.6)])
def test_the_local_candidates_hold_every_subnet_a_common_ratio_keeps(rule):
    groups = [ChannelGroup(str(n), n, n) for n in (4, 7, 9, 16)]
    family = _Family(groups, {g.id: np.zeros(g.num_channels) for g in groups}, rule, False)
    candidates = [tuple(family.counts(i).values()) for i in range(family.size + 1)]
    assert all(np.all(np.diff(candidates, axis=0) >= 0, axis=1))  # each keeps no less
    # the ratios at which a group changes are k / 32, k / 14, k / 18 or k / 8: a grid
    # of 1 / 20000 steps samples every stretch between two of them
    reached = {tuple(family.counts_at_ratio(r).values()) for r in np.linspace(0, 1, 20001)}
    assert reached <= set(candidates)
    assert len(candidates) <= sum(len(family.allowed[g.id]) for g in groups) + 1


def test_a_local_ratio_below_what_max_ratio_rounds_to_is_refused():
    # ratio=0.05 asks 0.4 of 8 channels: max_ratio=0.5 kept 4 of each group, silently,
    # while the global ranking refused it; 3.5 of 8 rounds to 4 (ties keep the larger)
    pruner = prepared()
    with pytest.raises(ValueError, match=r"ratio=0.05 cannot be met: the smallest subnet "
                       r"allowed \(.*\) keeps 4 of the 8 channels of group '0', more than the "
                       r"ratio rounds to; ask for ratio>=0.4375, .* Nothing was changed"):
        allocate(pruner, SCORES, ratio=0.05, max_ratio=0.5)
    assert kept(allocate(pruner, SCORES, ratio=0.4375, max_ratio=0.5)) == {'0': 4, '2': 4}
    with pytest.raises(ValueError, match='ratio=0.05 cannot be met'):
        allocate(pruner, SCORES, ratio=0.05, global_ranking=True, max_ratio=0.5)


@pytest.mark.parametrize('rules, smallest', [(dict(round_to=4), 4), ({}, 1)])
def test_a_small_local_ratio_keeps_the_floor_every_subnet_has(rules, smallest):
    """One channel, a multiple of round_to: floors of the rules themselves, kept (a model
    with a 2-head group still prunes its other groups at ratio=0.2)."""
    assert kept(allocate(prepared(), SCORES, ratio=0.05, **rules)) == \
        {'0': smallest, '2': smallest}


@pytest.mark.parametrize('option, message', [
    (dict(round_to=True), r'round_to must be a number \(a positive integer\), got True'),
    (dict(round_to='8'), r"round_to must be a number \(a positive integer\), got '8'"),
    (dict(max_ratio='0.5'), r'max_ratio must be a number \(the largest fraction of a group '
     r"that may be pruned\), got '0.5' \(str\)"),
    (dict(global_ranking='no'), r"global_ranking must be True or False, got 'no' \(str\)"),
    (dict(global_ranking='False'), "global_ranking must be True or False, got 'False'"),
    (dict(global_ranking=1), r'global_ranking must be True or False, got 1 \(int\)')])
def test_an_option_of_the_wrong_type_is_refused_by_name(option, message):
    # global_ranking='no' ranked globally (bool('no')), round_to=True pruned to multiples
    # of 1, max_ratio='0.5' failed comparing a str with an int
    with pytest.raises(TypeError, match=message):
        ImportancePruner(ratio=0.5, **option)
    for pruner in 'ImportancePruner', 'RatioPruner':
        with pytest.raises(TypeError, match=message):
            razorlib.prune(mlp(), X, ratio=0.5, pruner=pruner, **option)


def test_options_of_numpy_types_are_taken():
    pruner = ImportancePruner(ratio=0.5, global_ranking=np.bool_(True), round_to=np.int64(2),
                              max_ratio=np.float32(0.5))
    assert pruner.global_ranking is True and pruner.rule.round_to == 2
    assert WidthRule(round_to=4.0).round_to == 4
