"""Importance criteria: each on a net whose scores are computed by hand here, the
reductions and normalisations, aggregation over a residual group's coupled layers."""
import copy
import math

import numpy as np
import pytest
import torch
import torch.nn as nn
from doctest_helpers import assert_examples_pass, modules_of
from saved_tensors import layerwise_scores

import razorlib.pruning.importance
from razorlib.pruning import ImportancePruner, L1NormPruner
from razorlib.pruning.importance import (FisherImportance, ImportanceContext, build_importance,
                                         lamp)
from razorlib.registry import IMPORTANCES, PRUNERS

# fc1 (2 -> 3) -> ReLU -> fc2 (3 -> 2): one group, fc1's 3 output channels ('0').
W1 = [[1., -2.], [0., 3.], [0.5, 0.5]]
W2 = [[1., 0., -1.], [2., 1., 0.]]
# Three samples over two batches; fc1 has no bias, so its outputs are W1 x:
# h = [-1, 3, 1], [3, -3, 0], [-2, 3, 0.5]  ->  relu: [0, 3, 1], [3, 0, 0], [0, 3, 0.5]
X = torch.tensor([[1., 1.], [1., -1.], [0., 1.]])
DATA = [(X[:2], torch.zeros(2)), (X[2:], torch.zeros(1))]
RELU = np.array([[0., 3., 1.], [3., 0., 0.], [0., 3., 0.5]])
# With loss = outputs.sum(), dL/d(fc2 input) = the column sums of W2 = [3, 1, -1], so
# per sample f = relu(h) * [3, 1, -1] at fc2's input, and the same at fc1's output.
F = RELU * np.array([3., 1., -1.])


def sum_loss(outputs, targets):
    return outputs.sum()


def mean_loss(outputs, targets):
    """A batch mean, as the gradient criteria take ``loss_fn`` to be: sample ``n``'s own
    loss is its outputs' sum, whose gate gradient is ``F[n]``."""
    return outputs.sum() / len(outputs)


# Under mean_loss a sample's gate gradient is F[n] over its batch's size (2 or 1); the
# criteria weigh each batch by its size over the mean batch's (1.5): F[n] / 1.5 for all.
AT_MEAN_BATCH = F / 1.5


def mlp():
    net = nn.Sequential(nn.Linear(2, 3, bias=False), nn.ReLU(), nn.Linear(3, 2))
    with torch.no_grad():
        net[0].weight.copy_(torch.tensor(W1))
        net[2].weight.copy_(torch.tensor(W2))
    return net.eval()


def scores_of(model, importance, x=X, data=None, loss_fn=None):
    pruner = ImportancePruner(importance=importance)
    pruner.prepare_from_supernet(model, x)
    return pruner.score(data, loss_fn)


def test_l1_and_l2_add_the_output_rows_and_the_consumers_input_columns():
    # rows of W1: |.|1 = [3, 3, 1]; columns of W2: |.|1 = [3, 1, 1]
    scores = scores_of(mlp(), dict(type='l1', normalize='none'))
    np.testing.assert_allclose(scores['0'], [6., 4., 2.])
    l2 = scores_of(mlp(), dict(type='l2', normalize='none'))['0']
    np.testing.assert_allclose(l2, [2 * math.sqrt(5), 3 + 1, math.sqrt(0.5) + 1])


@pytest.mark.parametrize('reduction, expected', [('sum', [6., 4., 2.]), ('mean', [3., 2., 1.]),
                                                 ('max', [3., 3., 1.])])
def test_reductions(reduction, expected):
    scores = scores_of(mlp(), dict(type='l1', reduction=reduction, normalize='none'))
    np.testing.assert_allclose(scores['0'], expected)


def test_normalisations():
    raw = np.array([6., 4., 2.])
    for normalize, expected in (('mean', raw / 4), ('max', raw / 6),
                                ('lamp', [6 / 6, 4 / 10, 2 / 12])):
        scores = scores_of(mlp(), dict(type='l1', normalize=normalize))
        np.testing.assert_allclose(scores['0'], expected)
    np.testing.assert_allclose(lamp(np.array([2., 2., 1.])), [0.5, 0.5, 0.2])


def test_bn_scale_reads_the_norms_scale():
    net = nn.Sequential(nn.Conv2d(1, 3, 1), nn.BatchNorm2d(3), nn.ReLU(), nn.Conv2d(3, 2, 1))
    with torch.no_grad():
        net[1].weight.copy_(torch.tensor([0.5, -2., 1.]))
    scores = scores_of(net.eval(), dict(type='bn_scale', normalize='none'), torch.randn(1, 1, 4, 4))
    np.testing.assert_allclose(scores['0'], [0.5, 2., 1.])


def conv_norm_conv(norm: nn.Module) -> nn.Module:
    """conv (filters of L1 norm 1, 2, 3) -> norm (scales 0.5, -2, 1) -> conv (columns of
    L1 norm 1, 1, 1)."""
    net = nn.Sequential(nn.Conv2d(1, 3, 1, bias=False), norm, nn.ReLU(),
                        nn.Conv2d(3, 1, 1, bias=False))
    with torch.no_grad():
        net[0].weight.copy_(torch.tensor([1., 2., 3.]).reshape(3, 1, 1, 1))
        norm.weight.copy_(torch.tensor([0.5, -2., 1.]))
        net[3].weight.fill_(1.)
    return net.eval()


def test_l1_reads_a_batch_norms_scale_for_the_filters_it_normalises():
    x = torch.randn(1, 1, 4, 4)
    scores = scores_of(conv_norm_conv(nn.BatchNorm2d(3)), dict(type='l1', normalize='none'), x)
    np.testing.assert_allclose(scores['0'], [0.5 + 1, 2 + 1, 1 + 1])  # |gamma| + columns
    filters = scores_of(conv_norm_conv(nn.BatchNorm2d(3)),
                        dict(type='l1', normalize='none', norm_scales=False), x)
    np.testing.assert_allclose(filters['0'], [1 + 1, 2 + 1, 3 + 1])  # filters + columns


def test_l1_reads_the_filters_under_a_norm_with_shared_statistics():
    # one group of statistics over every channel does not divide out one filter's scale
    net = conv_norm_conv(nn.GroupNorm(1, 3))
    scores = scores_of(net, dict(type='l1', normalize='none'), torch.randn(1, 1, 4, 4))
    np.testing.assert_allclose(scores['0'], [1 + 1, 2 + 1, 3 + 1])


def test_a_group_without_a_norm_is_not_scored_by_bn_scale_and_kept_whole():
    pruner = ImportancePruner(importance='bn_scale', ratio=0.5)
    pruner.prepare_from_supernet(mlp(), X)
    assert pruner.score() == {}
    assert pruner.subnet_at(0.5)['0'].all()


def test_fpgm_sums_each_filters_distance_to_the_others():
    # rows [1, -2], [0, 3], [0.5, 0.5]: |r0 - r1| = sqrt(26), |r0 - r2| = |r1 - r2| = sqrt(6.5)
    scores = scores_of(mlp(), dict(type='fpgm', normalize='none'))['0']
    a, b = math.sqrt(26), math.sqrt(6.5)
    np.testing.assert_allclose(scores, [a + b, a + b, 2 * b])


def test_taylor_is_the_mean_absolute_first_order_term_at_each_use():
    at_one_use = np.abs(AT_MEAN_BATCH).mean(0)  # [3, 2, 0.5] / 1.5
    scores = scores_of(mlp(), dict(type='taylor', roles=('in', ), normalize='none'), data=DATA,
                       loss_fn=mean_loss)
    np.testing.assert_allclose(scores['0'], at_one_use)
    both = scores_of(mlp(), dict(type='taylor', normalize='none'), data=DATA, loss_fn=mean_loss)
    np.testing.assert_allclose(both['0'], 2 * at_one_use)  # fc1's output and fc2's input


def test_taylor_leaves_no_parameter_gradient_and_restores_the_mode():
    model = mlp().train()
    scores_of(model, 'taylor', data=DATA, loss_fn=sum_loss)
    assert all(p.grad is None for p in model.parameters()) and model.training


def test_fisher_is_half_the_summed_squares_of_the_shared_gate_gradient():
    scores = scores_of(mlp(), dict(type='fisher', normalize_by=None), data=DATA,
                       loss_fn=mean_loss)
    np.testing.assert_allclose(scores['0'], (AT_MEAN_BATCH ** 2).sum(0) / 2)  # [18, 4, 0.2778]


@pytest.mark.parametrize('importance', [dict(type='taylor', normalize='none'),
                                        dict(type='fisher', normalize_by=None)])
def test_gradient_criteria_count_every_sample_alike_whatever_its_batch(importance):
    # the default cross-entropy is a batch mean: unweighted, the last sample of batches
    # of 15 and 1 (a DataLoader's partial batch) counted as much as the other 15 and
    # changed the order
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 8, 3), nn.ReLU(),
                        nn.Flatten(), nn.Linear(8 * 2 * 2, 4)).eval()
    x, y = torch.randn(16, 3, 6, 6), torch.randint(0, 4, (16, ))

    def split(*sizes):
        bounds = np.cumsum((0, ) + sizes)
        return scores_of(copy.deepcopy(net), importance, x[:1],
                         [(x[a:b], y[a:b]) for a, b in zip(bounds, bounds[1:])])['0']

    halves, uneven, whole = split(8, 8), split(15, 1), split(16)
    np.testing.assert_allclose(uneven, halves, rtol=1e-6)  # both a mean batch of 8
    # one batch of 16: each sample's term half as large (Taylor), a quarter (Fisher)
    power = 1 if importance['type'] == 'taylor' else 2
    np.testing.assert_allclose(whole, halves / 2 ** power, rtol=1e-6)


def test_fisher_divides_by_the_flops_one_channel_of_the_group_costs():
    # fc1 (2 -> 3) -> fc2 (3 -> 4) -> fc3 (4 -> 2), one sample: a channel of fc1's group
    # costs 2 (its row) + 4 (fc2's column) MACs, one of fc2's group 3 + 2.
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    data = [(torch.randn(5, 2), torch.randint(0, 2, (5, )))]
    raw = scores_of(copy.deepcopy(net).eval(), dict(type='fisher', normalize_by=None), X[:1], data)
    per_flop = scores_of(copy.deepcopy(net), dict(type='fisher', normalize_by='flops'), X[:1],
                         data)
    np.testing.assert_allclose(per_flop['0'], raw['0'] / 6)
    np.testing.assert_allclose(per_flop['2'], raw['2'] / 5)


def test_fisher_by_memory_divides_by_the_activation_each_channel_occupies():
    # conv output and batch-norm output, 4x4 each: 32 elements per channel and sample
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 3, 1), nn.BatchNorm2d(3), nn.ReLU(), nn.Conv2d(3, 2, 1),
                        nn.Flatten(), nn.Linear(32, 2)).eval()
    data = [(torch.randn(2, 1, 4, 4), torch.tensor([0, 1]))]
    raw = scores_of(copy.deepcopy(net), dict(type='fisher', normalize_by=None), data[0][0], data)
    per_memory = scores_of(net, dict(type='fisher', normalize_by='memory'), data[0][0], data)
    np.testing.assert_allclose(per_memory['0'], raw['0'] / 32)


def test_fisher_gates_a_depthwise_conv_once_not_at_its_input_too():
    # conv -> depthwise -> pointwise: the group's cut is the pointwise conv's input; gating
    # the depthwise conv's input as well would count the channel twice.
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 4, 1), nn.ReLU(), nn.Conv2d(4, 4, 3, padding=1, groups=4),
                        nn.ReLU(), nn.Conv2d(4, 2, 1), nn.Flatten(), nn.Linear(32, 2)).eval()
    data = [(torch.randn(3, 1, 4, 4), torch.tensor([0, 1, 1]))]
    pruner = ImportancePruner(importance=dict(type='fisher', normalize_by=None))
    pruner.prepare_from_supernet(net, data[0][0])
    scores = pruner.score(data)['0']
    x = data[0][0]
    a = net[3](net[2](net[1](net[0](x)))).detach().requires_grad_()
    loss = nn.functional.cross_entropy(net[6](net[5](net[4](a))), data[0][1])
    (grad, ) = torch.autograd.grad(loss, a)
    f = (a * grad).sum((2, 3)).detach().double()
    np.testing.assert_allclose(scores, (f ** 2).sum(0).numpy() / 2, rtol=1e-6)


def test_activation_and_apoz_read_what_the_consumers_see():
    mean_abs = scores_of(mlp(), dict(type='activation', normalize='none'), data=DATA)
    np.testing.assert_allclose(mean_abs['0'], np.abs(RELU).mean(0))  # [1, 2, 0.5]
    apoz = scores_of(mlp(), dict(type='apoz', normalize='none'), data=DATA)
    np.testing.assert_allclose(apoz['0'], 1 - (RELU == 0).mean(0))  # [1/3, 2/3, 2/3]


def test_random_is_seeded_and_independent_of_other_groups():
    first = scores_of(mlp(), dict(type='random', seed=3, normalize='none'))
    again = scores_of(mlp(), dict(type='random', seed=3, normalize='none'))
    other = scores_of(mlp(), dict(type='random', seed=4))
    np.testing.assert_array_equal(first['0'], again['0'])
    assert not np.array_equal(first['0'], other['0'])
    assert ((first['0'] >= 0) & (first['0'] < 1)).all()


class Residual(nn.Module):
    """h = fc_in(x); r = h + fc_mid(relu(h)); out = fc_out(relu(r)): one group of three
    channels written by fc_in and fc_mid, read by fc_mid and fc_out."""

    def __init__(self):
        super().__init__()
        self.fc_in = nn.Linear(2, 3, bias=False)
        self.fc_mid = nn.Linear(3, 3, bias=False)
        self.fc_out = nn.Linear(3, 1, bias=False)
        with torch.no_grad():
            self.fc_in.weight.copy_(torch.tensor([[1., 1.], [2., 0.], [0., 0.5]]))
            self.fc_mid.weight.copy_(torch.tensor([[1., 0., 0.], [0., 0., 0.], [4., 1., 0.]]))
            self.fc_out.weight.copy_(torch.tensor([[1., 3., 0.5]]))

    def forward(self, x):
        h = self.fc_in(x)
        return self.fc_out(torch.relu(h + self.fc_mid(torch.relu(h))))


def test_scores_aggregate_over_every_coupled_layer_of_a_residual_group():
    # per channel: fc_in rows [2, 2, 0.5], fc_mid rows [1, 0, 5], fc_mid columns [5, 1, 0],
    # fc_out columns [1, 3, 0.5]
    model = Residual().eval()
    pruner = ImportancePruner(importance=dict(type='l1', normalize='none'))
    pruner.prepare_from_supernet(model, torch.randn(1, 2))
    (group, ) = pruner.groups.prunable.values()
    assert set(group.layers) == {'fc_in', 'fc_mid'} and set(group.consumers) == {'fc_mid', 'fc_out'}
    per_use = np.array([[2., 2., 0.5], [1., 0., 5.], [5., 1., 0.], [1., 3., 0.5]])
    for reduction, expected in (('sum', per_use.sum(0)), ('mean', per_use.mean(0)),
                                ('max', per_use.max(0))):
        pruner.importance = build_importance(dict(type='l1', reduction=reduction,
                                                  normalize='none'))
        np.testing.assert_allclose(pruner.score()[group.id], expected)


def test_roles_all_adds_norm_scales_and_bare_parameters():
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(2, 3, bias=False)
            self.scale = nn.Parameter(torch.tensor([1., -4., 2.]))
            self.norm = nn.LayerNorm(3)
            self.head = nn.Linear(3, 1, bias=False)
            with torch.no_grad():
                self.fc.weight.fill_(1.)
                self.norm.weight.copy_(torch.tensor([0.5, 1., 3.]))
                self.head.weight.fill_(2.)

        def forward(self, x):
            return self.head(self.norm(self.fc(x) * self.scale))

    weights_only = scores_of(Scaled().eval(), dict(type='l1', normalize='none'), X)
    np.testing.assert_allclose(weights_only['fc'], [2 + 2] * 3)
    everything = scores_of(Scaled().eval(), dict(type='l1', roles='all', normalize='none'), X)
    np.testing.assert_allclose(everything['fc'], np.array([4., 4., 4.]) + [1, 4, 2] + [0.5, 1, 3])


def test_l1_norm_pruner_is_the_l1_criterion_and_sums_as_before():
    model = Residual().eval()
    x = torch.randn(1, 2)
    l1 = L1NormPruner(ratio=0.5)
    l1.prepare_from_supernet(model, x)
    generic = PRUNERS.build(dict(type='ImportancePruner', importance='l1', ratio=0.5))
    generic.prepare_from_supernet(Residual().eval(), x)
    for gid, order in l1.channel_orders().items():
        np.testing.assert_array_equal(order, generic.channel_orders()[gid])
    raw = L1NormPruner(importance=dict(type='l1', normalize='none'))
    raw.prepare_from_supernet(Residual().eval(), x)
    np.testing.assert_allclose(raw.group_scores()['fc_in'], [9., 6., 6.])


def test_data_criteria_say_they_need_data_and_bad_names_are_listed():
    pruner = ImportancePruner(importance='taylor')
    pruner.prepare_from_supernet(mlp(), X)
    with pytest.raises(ValueError, match="'taylor' is computed from data: pass data="):
        pruner.score()
    with pytest.raises(RuntimeError, match=r'call pruner.score\(data=...\) first'):
        pruner.channel_orders()
    with pytest.raises(ValueError, match='not an \\(inputs, targets\\) pair'):
        pruner.score([X])
    with pytest.raises(KeyError, match="'l3' is not registered; known: .*'fpgm'"):
        build_importance('l3')
    with pytest.raises(ValueError, match="reduction 'median' is not one of"):
        build_importance(dict(type='l1', reduction='median'))


@pytest.mark.parametrize('importance, error, message', [
    # was TypeError: 'int' object is not iterable
    (3, TypeError, r'importance: a registered name \(activation, .*\), a config dict .* or an '
     r'Importance, got 3 \(int\)'),
    # was the registry's KeyError, naming neither the option nor the criteria
    (dict(normalize='max'), KeyError, "importance config {'normalize': 'max'} has no 'type'; "
     "known: .*'l1'"),
    # was TypeError: _Magnitude.__init__() got an unexpected keyword argument 'norm_scale'
    (dict(type='l1', norm_scale=False), TypeError, r"importance: L1Importance.__init__\(\) got "
     r"an unexpected keyword argument 'norm_scale' \(did you mean 'norm_scales'\?\); "
     'L1Importance takes reduction, normalize, roles, norm_scales'),
    # switches read by bool(): 'no' switched checkpointing on, or left the norms' scales read
    (dict(type='taylor', layerwise='no'), TypeError,
     "TaylorImportance: layerwise must be True or False, got 'no'"),
    (dict(type='fisher', layerwise='False'), TypeError,
     "FisherImportance: layerwise must be True or False, got 'False'"),
    (dict(type='l2', norm_scales='no'), TypeError,
     "L2Importance: norm_scales must be True or False, got 'no'"),
    # no roles: l1 kept every group whole, taylor refused the batches as not fitting
    (dict(type='l1', roles=[]), ValueError, 'L1Importance: roles is empty, so it reads no '
     'weight or tensor'),
    # was int('a')'s bare "invalid literal for int() with base 10"
    (dict(type='random', seed='a'), TypeError, r"RandomImportance: seed must be an integer, "
     r"got 'a' \(str\)"),
])
def test_a_bad_criterion_config_is_refused_naming_it(importance, error, message):
    with pytest.raises(error, match=message):
        build_importance(importance)


def test_a_gradient_criterion_says_what_it_cannot_differentiate():
    model = mlp()
    state = copy.deepcopy(model.state_dict())
    pruner = ImportancePruner(importance='taylor')
    pruner.prepare_from_supernet(model, X)
    # a detached loss was autograd's bare 'element 0 of tensors does not require grad'
    with pytest.raises(ValueError, match=r"importance 'taylor': the loss on batch 0 carries no "
                       r'gradient back to the model: loss_fn or the model detaches it'):
        pruner.score(DATA, lambda outputs, targets: sum_loss(outputs.detach(), targets))
    # bare parameters have no tensor to gate: was 'do the batches fit the model?'
    pruner.importance = build_importance(dict(type='taylor', roles=['param']))
    with pytest.raises(ValueError, match="importance 'taylor': none of the uses it reads is a "
                       "layer's input or output"):
        pruner.score(DATA, sum_loss)
    pruner.remove_masks()
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in state.items())
    assert all(p.grad is None and p.requires_grad for p in model.parameters())


def test_fisher_by_flops_needs_a_pruner_to_measure():
    model = mlp()
    pruner = ImportancePruner()
    pruner.prepare_from_supernet(model, X)
    ctx = ImportanceContext.from_pruner(pruner, data=DATA, loss_fn=sum_loss)
    with pytest.raises(ValueError, match='score through a pruner'):
        FisherImportance()(ctx)


def test_every_alias_is_registered():
    aliases = {'l1', 'l2', 'bn_scale', 'fpgm', 'taylor', 'fisher', 'activation', 'apoz',
               'random'}
    assert aliases <= set(IMPORTANCES.module_dict)


@pytest.mark.parametrize('name', modules_of(razorlib.pruning.importance))
def test_docstring_examples(name):
    assert_examples_pass(name)


class Block(nn.Module):
    """A pre-norm residual MLP block, wide inside; ``scale`` comes as a keyword, as a
    Hugging Face decoder layer's attention mask and rotary embeddings do."""

    def __init__(self, width: int = 8, hidden: int = 256):
        super().__init__()
        self.norm, self.fc1 = nn.LayerNorm(width), nn.Linear(width, hidden)
        self.act, self.fc2 = nn.GELU(), nn.Linear(hidden, width)

    def forward(self, x, *, scale=1.0):
        return x + scale * self.fc2(self.act(self.fc1(self.norm(x))))


class Blocks(nn.Module):
    """Four repeated blocks in an ``nn.ModuleList`` between an input and a head layer."""

    def __init__(self, depth: int = 4):
        super().__init__()
        self.inp, self.head = nn.Linear(2, 8), nn.Linear(8, 2)
        self.blocks = nn.ModuleList(Block() for _ in range(depth))

    def forward(self, x):
        x = self.inp(x)
        for block in self.blocks:
            x = block(x, scale=0.5)
        return self.head(x)


def blocks_and_data():
    torch.manual_seed(0)
    tokens = [torch.randn(3, 5, 2) for _ in range(2)]
    return Blocks().eval(), [(x, x.sum(-1)) for x in tokens]


def mse(outputs, targets):
    return (outputs.sum(-1) - targets).pow(2).mean()


GRADIENT_CRITERIA = [dict(type='taylor'), dict(type='fisher', normalize_by=None)]


@pytest.mark.parametrize('cfg', GRADIENT_CRITERIA)
def test_layerwise_scores_as_without_checkpointing_holding_a_fraction_of_the_forward(cfg):
    model, data = blocks_and_data()
    whole, held, _ = layerwise_scores(cfg, model, data[0][0], data, mse, False)
    layerwise, held_layerwise, _ = layerwise_scores(cfg, model, data[0][0], data, mse, True)
    assert whole.keys() == layerwise.keys() and len(whole) == 5  # 4 blocks' MLPs, residual
    for gid in whole:
        np.testing.assert_allclose(layerwise[gid], whole[gid], rtol=1e-5)
    print(f'{cfg["type"]}: layerwise holds {held_layerwise} of {held} bytes '
          f'({held_layerwise / held:.3f})')  # about 0.01: the input layer and head only
    assert held_layerwise < 0.1 * held


@pytest.mark.parametrize('cfg', GRADIENT_CRITERIA)
def test_layerwise_leaves_no_gradient_and_restores_the_mode_and_the_blocks(cfg):
    model, data = blocks_and_data()
    model.train()
    pruner = ImportancePruner(importance=dict(cfg, layerwise=True))
    pruner.prepare_from_supernet(model, data[0][0])
    pruner.score(data, mse)
    assert all(p.grad is None for p in model.parameters()) and model.training
    assert not any('forward' in vars(block) for block in model.blocks)


@pytest.mark.parametrize('cfg', GRADIENT_CRITERIA)
def test_layerwise_without_a_module_list_says_there_are_no_blocks(cfg):
    with pytest.raises(ValueError, match='layerwise=True: Sequential has no nn.ModuleList, so '
                       'no repeated blocks to checkpoint'):
        scores_of(mlp(), dict(cfg, layerwise=True), data=DATA, loss_fn=sum_loss)


def test_layerwise_builds_from_a_config_and_prunes_as_without():
    assert 'layerwise=True' in repr(build_importance(dict(type='fisher', layerwise=True)))
    model, data = blocks_and_data()
    slim = [razorlib.prune(copy.deepcopy(model), data[0][0], ratio=0.5, data=data, loss_fn=mse,
                           importance=dict(type='taylor', layerwise=layerwise))
            for layerwise in (False, True)]
    assert str(slim[0]) == str(slim[1])
    torch.testing.assert_close(slim[0](data[0][0]), slim[1](data[0][0]))
