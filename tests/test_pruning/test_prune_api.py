"""razorlib.prune: the default is L1 ratio pruning (batch norms' scales for the filters
they normalise); budgets, criteria, global ranking and data in one call; batch-norm
statistics re-estimated on the data."""
import copy
import warnings

import pytest
import torch
import torch.nn as nn
import zoo
from latency_fakes import ParamsRuntime

import razorlib
from razorlib.utils import get_model_complexity

X = torch.randn(2, 3, 8, 8)


class Net(nn.Module):
    """conv1 -> bn1 -> relu -> conv2 -> bn2 -> relu -> pool -> fc."""

    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.conv2, self.bn2 = nn.Conv2d(8, 12, 3, padding=1), nn.BatchNorm2d(12)
        self.fc = nn.Linear(12, 4)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        return self.fc(torch.relu(self.bn2(self.conv2(x))).mean((2, 3)))


def net():
    torch.manual_seed(0)
    model = Net()
    zoo.randomize_norms(model)
    return model.eval()


def batches(count=2, size=6):
    generator = torch.Generator().manual_seed(1)
    return [(torch.randn(size, 3, 8, 8, generator=generator),
             torch.randint(0, 4, (size, ), generator=generator)) for _ in range(count)]


def test_the_default_keeps_half_of_each_group_by_summed_l1():
    model = net()
    slim = razorlib.prune(model, X, ratio=0.5)
    # each group is normalised by a batch norm: its |gamma| stands for the filters that
    # write it (their scale is divided out), beside the consumers' input columns
    w1, w2, w3 = model.conv1.weight.detach(), model.conv2.weight.detach(), model.fc.weight
    l1_a = model.bn1.weight.detach().abs() + w2.abs().sum((0, 2, 3))
    l1_b = model.bn2.weight.detach().abs() + w3.detach().abs().sum(0)
    keep_a = l1_a.argsort(descending=True)[:4].sort().values
    keep_b = l1_b.argsort(descending=True)[:6].sort().values
    assert torch.equal(slim.conv1.weight, w1[keep_a])
    assert torch.equal(slim.conv2.weight, w2[keep_b][:, keep_a])
    assert torch.equal(slim.fc.weight, w3.detach()[:, keep_b])
    assert torch.equal(slim.bn1.running_mean, model.bn1.running_mean[keep_a])  # no data: kept


@pytest.mark.parametrize('pruner', ['ImportancePruner', 'RatioPruner'])
def test_a_ratio_between_two_widths_keeps_the_larger_whatever_their_parity(pruner):
    """Half of an odd width is a tie: every pruner keeps the larger count, as
    ``WidthRule.fit`` does (Python's round() would keep 2 of 5 but 4 of 7)."""
    widths, layers, channels = (5, 7, 9, 11, 13), [], 3
    for width in widths:
        layers += [nn.Conv2d(channels, width, 1), nn.ReLU()]
        channels = width
    model = nn.Sequential(*layers, nn.Conv2d(channels, 2, 1)).eval()
    slim = razorlib.prune(model, torch.randn(1, 3, 4, 4), ratio=0.5, pruner=pruner)
    assert [layer.out_channels for layer in slim[:-1:2]] == [3, 4, 5, 6, 7]


def test_a_bfloat16_model_prunes_and_stays_bfloat16():
    """numpy has no bfloat16: the masks are compared in torch before they become arrays."""
    model = net().to(torch.bfloat16)
    slim = razorlib.prune(model, X.to(torch.bfloat16), ratio=0.5)
    assert slim.conv1.out_channels == model.conv1.out_channels // 2
    assert {p.dtype for p in slim.parameters()} == {torch.bfloat16}


def test_pruning_channels_a_norm_takes_statistics_over_is_said():
    """A GroupNorm (or LayerNorm, RMSNorm) normalises over all its channels: the slim one
    over fewer, so the slim model is the masked supernet, not the dense model without
    those channels.  Per-channel statistics (BatchNorm) need no word."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3), nn.GroupNorm(4, 16), nn.ReLU(),
                          nn.Conv2d(16, 8, 3)).eval()
    with pytest.warns(UserWarning, match=r'razorlib.prune: pruned channels that a norm takes '
                      r'its statistics over, 0 -> 1 \(GroupNorm\): the slim norm normalises '
                      'over fewer channels'):
        razorlib.prune(model, torch.randn(1, 3, 8, 8), ratio=0.5)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        razorlib.prune(net(), X, ratio=0.5)  # batch norms


def test_norm_scales_false_reads_the_filters_as_before():
    model = net()
    slim = razorlib.prune(model, X, ratio=0.5, importance=dict(type='l1', norm_scales=False))
    # conv1's channels: its filters and conv2's input columns; conv2's: its filters and
    # fc's columns
    w1, w2, w3 = model.conv1.weight.detach(), model.conv2.weight.detach(), model.fc.weight
    l1_a = w1.abs().sum((1, 2, 3)) + w2.abs().sum((0, 2, 3))
    l1_b = w2.abs().sum((1, 2, 3)) + w3.detach().abs().sum(0)
    keep_a = l1_a.argsort(descending=True)[:4].sort().values
    keep_b = l1_b.argsort(descending=True)[:6].sort().values
    assert torch.equal(slim.conv1.weight, w1[keep_a])
    assert torch.equal(slim.fc.weight, w3.detach()[:, keep_b])


def test_budgets_criteria_and_global_ranking_in_one_call():
    model = zoo.MobileNetV2().eval()
    x = torch.randn(1, 3, 32, 32)
    dense = get_model_complexity(model, x)
    for kwargs in (dict(flops=0.5), dict(params=0.5, global_ranking=True, round_to=4),
                   dict(flops=0.4, importance='fpgm', max_ratio=0.8),
                   dict(flops=0.4, importance=dict(type='l2', normalize='lamp'),
                        global_ranking=True)):
        metric = 'flops' if 'flops' in kwargs else 'params'
        slim = razorlib.prune(model, x, **kwargs)
        achieved = getattr(get_model_complexity(slim, x), metric) / getattr(dense, metric)
        assert achieved <= kwargs[metric], (kwargs, achieved)
        assert achieved >= kwargs[metric] - 0.1, (kwargs, achieved)


def test_data_driven_criteria_score_on_the_batches_with_the_loss_given():
    model = net()
    seen = []

    def loss_fn(outputs, targets):
        seen.append(targets.shape[0])
        return nn.functional.cross_entropy(outputs, targets)

    slim = razorlib.prune(model, X, flops=0.5, importance='taylor', data=batches(3),
                          loss_fn=loss_fn)
    assert seen == [6, 6, 6]
    assert slim.conv1.out_channels < 8
    with pytest.raises(ValueError, match="'fisher' is computed from data: pass data="):
        razorlib.prune(model, X, importance='fisher')


def test_batch_norm_statistics_are_re_estimated_on_the_data_after_slicing():
    model = net()
    data = batches(2)
    slim = razorlib.prune(model, X, ratio=0.5, importance='activation', data=iter(data))
    # each batch norm: the mean of the batches' means and of their unbiased variances
    # of its input, as the slim model computes it
    with torch.no_grad():
        inputs = [slim.conv1(x) for x, _ in data]
        mean = torch.stack([i.mean((0, 2, 3)) for i in inputs]).mean(0)
        var = torch.stack([i.var((0, 2, 3), unbiased=True) for i in inputs]).mean(0)
    assert torch.allclose(slim.bn1.running_mean, mean, atol=1e-5)
    assert torch.allclose(slim.bn1.running_var, var, atol=1e-5)
    assert slim.bn1.momentum == model.bn1.momentum and not slim.training
    assert not torch.allclose(slim.bn2.running_mean,
                              razorlib.prune(model, X, ratio=0.5).bn2.running_mean)


def test_an_unreachable_budget_raises_and_leaves_the_model_untouched():
    model = net()
    state = copy.deepcopy(model.state_dict())
    with pytest.raises(ValueError, match=r'params=0.01 cannot be met: .* keeps 0\.\d+ of the '
                                         r"dense model's params"):
        razorlib.prune(model, X, params=0.01)
    assert set(model.state_dict()) == set(state)  # no mask buffer
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in state.items())


@pytest.mark.parametrize('kwargs,error,message', [
    (dict(ratio=(0.5, 0.7)), TypeError, r'ratio is a fraction of the dense model, a number in '
     r'\(0, 1\]; got \(0.5, 0.7\) \(a pruner config takes ratios=\(...\) to sample from\)'),
    (dict(ratio='0.5'), TypeError, "got '0.5'$"),  # was read as ratios ('0', '.', '5')
    (dict(ratio=True), TypeError, 'got True'),  # was 1.0
    (dict(flops=[0.5]), TypeError, r'flops is a fraction .* got \[0.5\]$'),
    # a config without a type was a bare KeyError: 'type' (or the registry's words)
    (dict(pruner=dict(ratios=(0.5, )), importance='l2'), ValueError,
     r"razorlib.prune: the pruner config \{'ratios': \(0.5,\)\} has no 'type'; registered "
     'pruners: ImportancePruner, L1NormPruner, RatioPruner'),
    (dict(pruner=3), TypeError, r'razorlib.prune: pruner= is a registered pruner name \(.*\) '
     r'or a config dict, got 3 \(int\)'),  # was 'int' object is not iterable
    (dict(pruner='L1Pruner'), ValueError, "razorlib.prune: pruner 'L1Pruner' is not "
     'registered; registered pruners: ImportancePruner, L1NormPruner'),
    (dict(hidden='no'), TypeError, "razorlib.prune: hidden must be True or False, got 'no'"),
    (dict(importance='taylor', data=3), TypeError, 'razorlib.prune: data= is an iterable of '
     r'\(inputs, targets\) batches, not int'),  # was 'int' object is not iterable
])
def test_bad_arguments_are_named_and_change_nothing(kwargs, error, message):
    model = net()
    state = copy.deepcopy(model.state_dict())
    with pytest.raises(error, match=message):
        razorlib.prune(model, X, **kwargs)
    assert set(model.state_dict()) == set(state)
    assert razorlib.prune(model, X, except_start_keys='fc')(X).shape == (2, 4)


def test_an_exception_key_that_names_nothing_is_said():
    # a typo pruned what it meant to keep, without a word
    with pytest.warns(UserWarning, match=r"except_start_keys: 'fc.weigth' starts no module or "
                      r"parameter name of the Net, so it excludes nothing \(names such as "
                      r"'fc.weight'"):
        razorlib.prune(net(), X, except_start_keys=['fc.weigth'])


@pytest.mark.parametrize('rules', [dict(round_to=64), dict(max_ratio=0.0)])
def test_rules_that_keep_every_channel_are_said_or_refused(rules):
    # one ratio per group is rounded by the rules: the whole model comes back, with a
    # warning; a ratio of all channels (global ranking) is a budget, refused as flops= is
    with pytest.warns(UserWarning, match=r'razorlib.prune: nothing was pruned: every channel '
                      f'is kept \\({next(iter(rules))}='):
        slim = razorlib.prune(net(), X, ratio=0.5, **rules)
    assert slim.conv1.out_channels == 8
    with pytest.raises(ValueError, match=r'ratio=0.5 cannot be met: the smallest subnet allowed '
                       r'\(.*\) keeps 1.0000 of the channels; ask for ratio>=1.0000, or '
                       r'lower round_to / raise max_ratio. Nothing was changed'):
        razorlib.prune(net(), X, ratio=0.5, global_ranking=True, **rules)


def test_other_pruners_keep_their_own_ranking():
    model = net()
    slim = razorlib.prune(model, X, flops=0.5, pruner='RatioPruner')
    assert torch.equal(slim.conv1.weight, model.conv1.weight[:slim.conv1.out_channels])
    with pytest.raises(ValueError, match="'RatioPruner' ranks channels its own way"):
        razorlib.prune(model, X, importance='l2', pruner='RatioPruner')
    with pytest.raises(ValueError, match='give one budget'):
        razorlib.prune(model, X, ratio=0.5, flops=0.5)


def test_an_option_the_call_gives_wins_over_the_pruner_config_s_own():
    first, second = ParamsRuntime(cache_dir=False), ParamsRuntime(cache_dir=False)
    razorlib.prune(net(), X, latency=0.5, runtime=first,
                   pruner=dict(type='ImportancePruner', runtime=second))
    assert first.calls > 0 and second.calls == 0
    razorlib.prune(net(), X, latency=0.5, pruner=dict(type='ImportancePruner', runtime=second))
    assert second.calls > 0  # the config's own where the call gives none
    # 6 of conv2's 12 channels, or the config's rule: a multiple of 4 (8), or at most a
    # quarter pruned (9, more than half: refused); given, even at their defaults, the
    # call's rules win
    config = dict(type='ImportancePruner', round_to=4)
    assert razorlib.prune(net(), X, ratio=0.5, pruner=config).conv2.out_channels == 8
    quarter = dict(type='ImportancePruner', max_ratio=0.25)
    with pytest.raises(ValueError, match=r'ratio=0.5 cannot be met: .*max_ratio=0.25\) keeps 9 '
                       'of the 12 channels'):
        razorlib.prune(net(), X, ratio=0.5, pruner=quarter)
    for config in config, quarter:
        assert razorlib.prune(net(), X, ratio=0.5, round_to=1, max_ratio=None,
                              pruner=config).conv2.out_channels == 6
    unscored = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 2, 1)).eval()
    with warnings.catch_warnings():
        warnings.simplefilter('error')  # bn_scale would score no channel of 0
        slim = razorlib.prune(unscored, X, ratio=0.5, importance='l1',
                              pruner=dict(type='ImportancePruner', importance='bn_scale'))
    assert slim[0].out_channels == 4


def test_groups_a_criterion_cannot_score_are_kept_whole_with_a_warning():
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 8, 3), nn.BatchNorm2d(8),
                          nn.ReLU(), nn.Conv2d(8, 2, 1)).eval()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        slim = razorlib.prune(model, X, ratio=0.5, importance='bn_scale')
    assert slim[0].out_channels == 8 and slim[2].out_channels == 4
    assert any('scores no channel of 0: kept whole' in str(w.message) for w in caught)


def test_a_misspelled_argument_is_named_with_the_closest_one():
    with pytest.raises(TypeError, match=r"^razorlib.prune: unexpected argument 'fllops' \(did "
                       r"you mean 'flops'\?\)$"):
        razorlib.prune(net(), X, fllops=0.5)
    with pytest.raises(TypeError, match=r"unexpected argument 'excep_start_keys' \(did you "
                       r"mean 'except_start_keys'\?\)"):
        razorlib.prune(net(), X, excep_start_keys=['conv1'])


class _Flip(torch.autograd.Function):
    """An op razorlib has no rule for."""

    @staticmethod
    def forward(ctx, x):
        return x.flip(1)

    @staticmethod
    def backward(ctx, grad):
        return grad.flip(1)


class _Frozen(nn.Module):
    """conv ``a`` -> ``step`` -> conv ``b``: ``a``'s channels freeze at ``step``."""

    def __init__(self, step):
        super().__init__()
        self.a, self.b, self.step = nn.Conv2d(3, 8, 1), nn.Conv2d(8, 4, 1), step

    def forward(self, x):
        return self.b(self.step(self.a(x)))


@pytest.mark.parametrize('step,hint', [
    (_Flip.apply, True),
    (lambda y: y.masked_fill(torch.arange(8).view(1, -1, 1, 1) > 5, 0.), False)])
def test_the_unpruned_warning_suggests_a_rule_only_for_an_unknown_op(step, hint):
    with pytest.warns(UserWarning, match='left some layers unpruned') as caught:
        razorlib.prune(_Frozen(step), torch.randn(1, 3, 4, 4), ratio=0.5)
    message = next(str(w.message) for w in caught if 'left some layers' in str(w.message))
    assert ('[unknown-op]' in message) == hint and ('[runtime]' in message) != hint
    assert ('Add a rule for an unknown op' in message) == hint


@pytest.mark.parametrize('pruner', ['RatioPruner', 'L1NormPruner', 'ImportancePruner'])
def test_a_sampled_subnet_keeps_round_to_and_max_ratio(pruner):
    """Without a budget, a pruner config of several ratios samples the subnet: the
    width rules hold there too (a RatioPruner, which knows no rule, kept 38 and 115
    channels of 128 under round_to=16)."""
    import random
    model = nn.Sequential(nn.Conv2d(3, 128, 3), nn.ReLU(), nn.Conv2d(128, 128, 3), nn.ReLU(),
                          nn.Conv2d(128, 4, 1))
    x = torch.randn(1, 3, 16, 16)
    ratios = (0.1, 0.3, 0.5, 0.7, 0.9)
    for seed in range(3):
        random.seed(seed)
        slim = razorlib.prune(model, x, pruner=dict(type=pruner, ratios=ratios), round_to=16)
        assert all(slim[i].out_channels % 16 == 0 for i in (0, 2)), seed
        random.seed(seed)
        slim = razorlib.prune(model, x, pruner=dict(type=pruner, ratios=ratios), max_ratio=0.6)
        assert all(slim[i].out_channels >= 0.4 * 128 for i in (0, 2)), seed


def test_nothing_pruned_says_which_reason_froze_the_groups():
    # a pixel shuffle mixes its input channels: the only group of several channels is
    # frozen, and the warning named no reason ("no prunable group can lose a channel")
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.PixelShuffle(2), nn.Conv2d(2, 4, 1))
    with pytest.warns(UserWarning, match=r'^razorlib.prune: nothing was pruned: every channel is '
                      r'kept \(no group can be pruned: 0 frozen by \[mixing\] '
                      r'PixelShuffleBackward0: mixes channels in a way razorlib cannot slice; '
                      r'after 1; before 3\); the model is returned whole$'):
        razorlib.prune(model, X)


def test_nothing_pruned_names_a_layer_no_group_holds():
    from torch.nn.utils.parametrizations import weight_norm
    model = nn.Sequential(weight_norm(nn.Conv2d(3, 8, 3)), nn.ReLU(), nn.Conv2d(8, 4, 1))
    with pytest.warns(UserWarning, match=r'\(no group can be pruned: no channel group holds 0 '
                      r'\(ParametrizedConv2d\) \(a layer whose weight is computed, as by '
                      r'weight_norm, is not pruned\)\); the model is returned whole$'):
        slim = razorlib.prune(model, X)
    assert slim[0].out_channels == 8
