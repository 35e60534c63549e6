"""Importance criteria where a channel owns several slots of one use (the H*W columns a
Linear after a flatten reads it through, a depthwise conv's outputs), where one layer's
input and output are in one group, and on a model already pruned: every expected value
is computed by hand here."""
import copy
import math

import numpy as np
import pytest
import torch
import torch.nn as nn

from razorlib.pruning import ImportancePruner

# one sample, 2x2: relu(x) = [1, 0, 3, 0], relu(-x) = [0, 2, 0, 0]
X = torch.tensor([[[[1., -2.], [3., 0.]]]])


def sum_loss(outputs, targets):
    return outputs.sum()


def prepared(model, importance, x=X, **kwargs):
    pruner = ImportancePruner(importance=importance, **kwargs)
    pruner.prepare_from_supernet(copy.deepcopy(model), x)
    return pruner


def conv_flatten_linear(filters, columns):
    """conv (1 -> 2 channels, 1x1) -> flatten -> Linear(8, 1): channel ``c`` owns the four
    columns ``4c`` to ``4c + 3`` of the Linear."""
    net = nn.Sequential(nn.Conv2d(1, 2, 1, bias=False), nn.Flatten(), nn.Linear(8, 1, bias=False))
    with torch.no_grad():
        net[0].weight.copy_(torch.tensor(filters).view(2, 1, 1, 1))
        net[2].weight.copy_(torch.tensor([columns]))
    return net.eval()


def test_l2_is_the_norm_of_all_the_columns_a_flattened_channel_owns():
    # channel 0 owns one weight 2 (L2 2.0), channel 1 four weights 0.6 (L2 1.2, not 2.4)
    net = conv_flatten_linear([1., 1.], [2., 0., 0., 0., .6, .6, .6, .6])
    pruner = prepared(net, dict(type='l2', roles=['in'], normalize='none'), ratio=0.5)
    np.testing.assert_allclose(pruner.score()['0'], [2.0, 1.2], rtol=1e-6)
    assert pruner.allocate().subnet['0'].tolist() == [True, False]


@pytest.mark.parametrize('criterion, reduction, expected', [
    ('l2', 'sum', [1 + 2.0, 1 + 1.2]), ('l2', 'mean', [1.5, 1.1]), ('l2', 'max', [2.0, 1.2]),
    ('l1', 'sum', [1 + 2.0, 1 + 2.4]), ('l1', 'mean', [1.5, 1.7]), ('l1', 'max', [2.0, 2.4])])
def test_a_flattened_channels_columns_are_one_use_of_the_reduction(criterion, reduction,
                                                                   expected):
    # two uses per channel: the conv filter (1) and the Linear's four columns
    net = conv_flatten_linear([1., 1.], [2., 0., 0., 0., .6, .6, .6, .6])
    scores = prepared(net, dict(type=criterion, reduction=reduction, normalize='none')).score()
    np.testing.assert_allclose(scores['0'], expected, rtol=1e-6)


def relu_flatten_linear():
    """conv (1 -> 2, filters 1 and -1) -> ReLU -> flatten -> Linear(8, 1)."""
    net = conv_flatten_linear([1., -1.], [1.] * 8)
    return nn.Sequential(net[0], nn.ReLU(), net[1], net[2]).eval()


def test_activation_and_apoz_are_means_over_a_flattened_channels_positions():
    # samples x and -1s: channel 0 sees [1, 0, 3, 0] and [0, 0, 0, 0], channel 1
    # [0, 2, 0, 0] and [1, 1, 1, 1]
    data = [(torch.cat([X, -torch.ones_like(X)]), torch.zeros(2))]
    mean_abs = prepared(relu_flatten_linear(), dict(type='activation', normalize='none'))
    np.testing.assert_allclose(mean_abs.score(data)['0'], [4 / 8, 6 / 8])
    apoz = prepared(relu_flatten_linear(), dict(type='apoz', normalize='none')).score(data)
    np.testing.assert_allclose(apoz['0'], [1 - 6 / 8, 1 - 3 / 8])  # in [0, 1]


class TwoGroups(nn.Module):
    """Group ``a`` (ReLU of filters 1, -1, 2) read by a Linear after a flatten, group ``b``
    (filters 1, bias 10: never zero) read by a conv."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.fa = nn.Conv2d(1, 3, 1, bias=False), nn.Linear(12, 2)
        self.b, self.cb = nn.Conv2d(1, 3, 1), nn.Conv2d(3, 2, 2)
        with torch.no_grad():
            self.a.weight.copy_(torch.tensor([1., -1., 2.]).view(3, 1, 1, 1))
            self.b.weight.fill_(1.)
            self.b.bias.fill_(10.)

    def forward(self, x):
        return self.fa(torch.relu(self.a(x)).flatten(1)) + self.cb(torch.relu(self.b(x))).flatten(1)


def test_global_apoz_ranks_a_flattened_group_on_the_same_scale():
    # a: 1 - zero share = [2/4, 1/4, 2/4]; b: [1, 1, 1].  Scaled by the 4 positions, a
    # would outrank b and keep 2 channels of 3.
    pruner = prepared(TwoGroups().eval(), dict(type='apoz', normalize='none'),
                      global_ranking=True, ratio=0.5)
    scores = pruner.score([(X, torch.zeros(1))])
    np.testing.assert_allclose(scores['a'], [0.5, 0.25, 0.5])
    np.testing.assert_allclose(scores['b'], [1., 1., 1.])
    kept = pruner.allocate().subnet
    assert int(kept['a'].sum()) == 1 and int(kept['b'].sum()) == 2


def test_taylor_takes_the_absolute_value_of_the_sum_over_a_channels_positions():
    # loss = output sum, so dL/da is the Linear's column: channel 0 (a = x, columns 1)
    # f = [1, -2, 3, 0], |sum| 2 (sum of |.| 6); channel 1 (a = -x, columns [0, 1.5, 0, 0])
    # f = [0, 3, 0, 0], 3.  The sample -x flips every f: the mean of |f_n| is unchanged.
    net = conv_flatten_linear([1., -1.], [1., 1., 1., 1., 0., 1.5, 0., 0.])
    data = [(torch.cat([X, -X]), torch.zeros(2))]
    for role in ('in', 'out'):  # the Linear's 8 columns, the conv's 2 outputs
        pruner = prepared(net, dict(type='taylor', roles=[role], normalize='none'), ratio=0.5)
        np.testing.assert_allclose(pruner.score(data, sum_loss)['0'], [2., 3.], rtol=1e-6)
        assert pruner.allocate().subnet['0'].tolist() == [False, True]


class ResidualLinear(nn.Module):
    """a = fc0(x); y = a + fc1(a); out = fc3(y): fc1's input and output are one group."""

    def __init__(self):
        super().__init__()
        self.fc0 = nn.Linear(1, 2, bias=False)
        self.fc1 = nn.Linear(2, 2, bias=False)
        self.fc3 = nn.Linear(2, 1, bias=False)
        with torch.no_grad():
            self.fc0.weight.copy_(torch.tensor([[1.], [2.]]))
            self.fc1.weight.copy_(torch.tensor([[1., 0.], [1., 1.]]))
            self.fc3.weight.copy_(torch.tensor([[1., -1.]]))

    def forward(self, x):
        a = self.fc0(x)
        return self.fc3(a + self.fc1(a))


def test_fisher_gates_a_dense_layers_input_in_its_own_group():
    # x = 1: a = [1, 2], y = [2, 5]; dL/dy = [1, -1], dL/d(fc1 input) = W1^T [1, -1] = [0, -1]
    # f = a * [0, -1] + y * [1, -1] = [0, -2] + [2, -5] = [2, -7]  ->  f**2 / 2 = [2, 24.5]
    # (gated at fc3's input only: [2, 12.5])
    pruner = prepared(ResidualLinear().eval(), dict(type='fisher', normalize_by=None),
                      torch.ones(1, 1))
    (group, ) = pruner.groups.prunable.values()
    assert set(group.consumers) == {'fc1', 'fc3'}
    scores = pruner.score([(torch.ones(1, 1), torch.zeros(1))], sum_loss)
    np.testing.assert_allclose(scores[group.id], [2., 24.5], rtol=1e-6)


def producer_depthwise_consumer(depthwise, consumer):
    """conv (1 -> 2, filters 1 and 0.2) -> depthwise conv -> conv (-> 1), all 1x1 without
    bias: no norm reads the depthwise conv's filter in place."""
    outputs = len(depthwise)
    net = nn.Sequential(nn.Conv2d(1, 2, 1, bias=False),
                        nn.Conv2d(2, outputs, 1, groups=2, bias=False),
                        nn.Conv2d(outputs, 1, 1, bias=False))
    with torch.no_grad():
        net[0].weight.copy_(torch.tensor([1., .2]).view(2, 1, 1, 1))
        net[1].weight.copy_(torch.tensor(depthwise).view(outputs, 1, 1, 1))
        net[2].weight.copy_(torch.tensor(consumer).view(1, outputs, 1, 1))
    return net.eval()


def test_l1_reads_a_depthwise_filter_once():
    # ch0: 1 + 0 + 1 = 2.0, ch1: 0.2 + 1 + 0.2 = 1.4 (the filter twice: 2.0, 2.4)
    net = producer_depthwise_consumer([0., 1.], [1., .2])
    pruner = prepared(net, dict(type='l1', normalize='none'), torch.ones(1, 1, 2, 2), ratio=0.5)
    np.testing.assert_allclose(pruner.score()['0'], [2.0, 1.4], rtol=1e-6)
    assert pruner.allocate().subnet['0'].tolist() == [True, False]


@pytest.mark.parametrize('criterion, reduction, expected', [
    ('l1', 'sum', [1 + .5 + 2, .2 + 2 + .4]), ('l1', 'mean', [3.5 / 3, 2.6 / 3]),
    ('l2', 'sum', [1 + .5 + math.sqrt(2), .2 + math.sqrt(2) + math.sqrt(.08)])])
def test_a_depthwise_multipliers_outputs_are_one_use_read_once(criterion, reduction, expected):
    # two outputs per channel: depthwise filters [0, 0.5] and [1, 1], consumer columns
    # [1, 1] and [0.2, 0.2]; three uses per channel: producer, depthwise, consumer
    net = producer_depthwise_consumer([0., .5, 1., 1.], [1., 1., .2, .2])
    scores = prepared(net, dict(type=criterion, reduction=reduction, normalize='none'),
                      torch.ones(1, 1, 2, 2)).score()
    np.testing.assert_allclose(scores['0'], expected, rtol=1e-6)


def test_fisher_flops_are_what_a_live_channel_removes_from_the_current_subnet():
    # fc0 (2 -> 4) -> fc1 (4 -> 8, 2 kept) -> fc2 (8 -> 2), one sample, MACs without bias:
    # a channel of fc0's group costs 2 (its row) + 2 (fc1's column at 2 kept outputs),
    # not 2 + 8 at full width; one of fc1's group 4 + 2.
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(2, 4), nn.ReLU(), nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    data = [(torch.randn(5, 2), torch.randint(0, 2, (5, )))]
    subnet = {'0': torch.ones(4, dtype=torch.bool),
              '2': torch.tensor([0, 0, 1, 1, 0, 0, 0, 0], dtype=torch.bool)}
    scores = {}
    for normalize_by in (None, 'flops'):
        pruner = prepared(net, dict(type='fisher', normalize_by=normalize_by), torch.ones(1, 2))
        pruner.set_subnet(subnet)
        scores[normalize_by] = pruner.score(data)
    assert (scores[None]['0'] > 0).all()
    np.testing.assert_allclose(scores['flops']['0'], scores[None]['0'] / 4)
    np.testing.assert_allclose(scores['flops']['2'], scores[None]['2'] / 6)


def test_bn_scale_reads_the_norms_not_a_prelus_slopes():
    # the PReLU's slopes follow the conv's channels as the norm's scales do; bn_scale
    # ranks by the norm's |gamma| alone
    from razorlib.pruning import ImportancePruner
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 2, 1), torch.nn.BatchNorm2d(2),
                                torch.nn.PReLU(2), torch.nn.Conv2d(2, 3, 1)).eval()
    with torch.no_grad():
        model[1].weight.copy_(torch.tensor([1.0, 2.0]))
        model[2].weight.copy_(torch.tensor([50.0, 0.1]))
    pruner = ImportancePruner(ratio=0.5, importance='bn_scale')
    pruner.prepare_from_supernet(model, torch.randn(1, 3, 4, 4))
    (scores, ) = pruner.score().values()
    assert scores.tolist() == pytest.approx([1.0 / 1.5, 2.0 / 1.5])  # normalised by the mean


class GroupConvBesideConv(nn.Module):
    """d reads cat(g, c): g's two channels are bound by its 2 groups and own two columns
    each, ``[10, 0]`` and ``[6, 8]``; c's three channels one each, ``0``, ``1``, ``3``."""

    def __init__(self):
        super().__init__()
        self.p = nn.Conv2d(1, 4, 1, bias=False)
        self.g = nn.Conv2d(4, 4, 1, groups=2, bias=False)
        self.c = nn.Conv2d(1, 3, 1, bias=False)
        self.d = nn.Conv2d(7, 1, 1, bias=False)
        with torch.no_grad():  # g's output o is channel o % 2 of its group
            self.d.weight.copy_(torch.tensor([10., 6., 0., 8., 0., 1., 3.]).view(1, 7, 1, 1))

    def forward(self, x):
        return self.d(torch.cat([self.g(self.p(x)), self.c(x)], 1))


def test_fpgm_compares_a_channel_with_those_that_own_as_many_weights():
    # c: |0-1| + |0-3| = 4, |1-0| + |1-3| = 3, |3-0| + |3-1| = 5: channel 1 is the median.
    # Padded to [x, 0] and compared with g's [10, 0] and [6, 8] too, c would score
    # 4 + 10 + 10, 3 + 9 + sqrt(89), 5 + 7 + sqrt(73) = 24, 21.4, 20.5: channel 2 pruned.
    pruner = prepared(GroupConvBesideConv().eval(),
                      dict(type='fpgm', roles=['in'], normalize='none'), torch.ones(1, 1, 2, 2),
                      ratio=2 / 3)
    scores = pruner.score()
    np.testing.assert_allclose(scores['c'], [4., 3., 5.], rtol=1e-6)
    np.testing.assert_allclose(scores['g'], [math.sqrt(80)] * 2, rtol=1e-6)
    assert pruner.allocate().subnet['c'].tolist() == [True, False, True]


class DepthwiseToChannelSum(nn.Module):
    """conv (1 -> 2, filters 1 and 2) -> depthwise conv (filters 3 and -1, biases 1) ->
    a sum over the channels: the depthwise conv is the group's only reader."""

    def __init__(self, depthwise_layers=1):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 1, bias=False)
        self.dw = nn.Sequential(*(nn.Conv2d(2, 2, 1, groups=2) for _ in range(depthwise_layers)))
        with torch.no_grad():
            self.conv.weight.copy_(torch.tensor([1., 2.]).view(2, 1, 1, 1))
            for dw in self.dw:
                dw.weight.copy_(torch.tensor([3., -1.]).view(2, 1, 1, 1))
                dw.bias.fill_(1.)

    def forward(self, x):
        return self.dw(self.conv(x)).sum(1)


def test_fisher_gates_a_group_only_a_depthwise_conv_reads_at_its_output():
    # samples x = 1, 2: the depthwise output is y = [3x + 1, -2x + 1] = [4, -1], [7, -3];
    # loss = sum(y), so f = y and sum_n f**2 / 2 = [(16 + 49) / 2, (1 + 9) / 2].  (Gated at
    # the conv's output too, f would be 2y - 1: [7, -3], [13, -7].)
    pruner = prepared(DepthwiseToChannelSum().eval(), dict(type='fisher', normalize_by=None),
                      torch.ones(1, 1, 1, 1))
    (group, ) = pruner.groups.prunable.values()
    assert group.consumers == ['dw.0']
    data = [(torch.tensor([1., 2.]).view(2, 1, 1, 1), torch.zeros(2))]
    np.testing.assert_allclose(pruner.score(data, sum_loss)[group.id], [32.5, 5.], rtol=1e-6)


def test_fisher_refuses_a_group_only_a_chain_of_depthwise_convs_reads():
    pruner = prepared(DepthwiseToChannelSum(depthwise_layers=2).eval(),
                      dict(type='fisher', normalize_by=None), torch.ones(1, 1, 1, 1))
    data = [(torch.ones(1, 1, 1, 1), torch.zeros(1))]
    with pytest.raises(ValueError, match=r"group 'conv' is read only by layers that pass its "
                                         r'channels on \(dw.0, dw.1\)'):
        pruner.score(data, sum_loss)
