"""Sensitivity allocation: each group's width from its measured loss increase, one
threshold for all groups; the measured losses are those of the sliced model."""
import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import zoo
from test_allocation import kept, mlp

import razorlib
from razorlib.pruning import ImportancePruner, allocate
from razorlib.pruning.sensitivity import measure_sensitivity, threshold_counts
from razorlib.utils import get_model_complexity
from razorlib.utils.batch_norm import reestimate_bn_stats


def resnet_data():
    torch.manual_seed(0)
    model = zoo.ResNetBasic().eval()
    data = [(torch.randn(8, 3, 16, 16), torch.randint(0, 10, (8, ))) for _ in range(2)]
    return model, data


def test_one_threshold_cuts_the_insensitive_group_deeper():
    pruner = ImportancePruner()
    pruner.prepare_from_supernet(mlp(), torch.randn(1, 4))
    scores = {'0': np.ones(8), '2': np.arange(8.0)[::-1].copy()}
    table = {'0': {1: 3.0, 2: 2.0, 4: 1.0, 6: 0.5}, '2': {1: 0.01, 2: 0.02, 4: 0.03, 6: 0.04}}
    # thresholds 3, 2, 1, 0.5 keep 2, 3, 5, 7 channels; 0.04 keeps group '0' whole (9)
    allocation = allocate(pruner, scores, ratio=0.5, sensitivity=table)
    assert kept(allocation) == {'0': 6, '2': 1} and allocation.ratio is None
    assert allocation.subnet['2'].nonzero()[0].tolist() == [0]  # its best channel by score
    assert kept(allocate(pruner, scores, ratio=1.0, sensitivity=table)) == {'0': 8, '2': 8}
    with pytest.raises(ValueError, match='ratio=0.1 cannot be met'):
        allocate(pruner, scores, ratio=0.1, sensitivity=table)
    with pytest.raises(ValueError, match='choose one allocation'):
        allocate(pruner, scores, ratio=0.5, sensitivity=table, global_ranking=True)


def test_a_width_is_as_sensitive_as_any_wider_one():
    assert threshold_counts({1: 0.01, 2: 0.5, 4: 0.03}, 8) == {8: -np.inf, 4: 0.03, 2: 0.5,
                                                                1: 0.5}


def test_measured_losses_are_those_of_the_sliced_model_with_norms_reestimated():
    model, data = resnet_data()
    pruner = ImportancePruner()
    pruner.prepare_from_supernet(copy.deepcopy(model), data[0][0][:1])
    state = copy.deepcopy(pruner.model.state_dict())
    orders = pruner.channel_orders()
    table = measure_sensitivity(pruner, orders, data, steps=4)
    assert set(table) == set(orders)
    # the model, its masks and its norms' statistics are as they were
    after = pruner.model.state_dict()
    assert all(torch.equal(state[key], after[key]) for key in state)

    def loss(net):
        with torch.no_grad():
            return sum(float(F.cross_entropy(net(x), y)) for x, y in data) / len(data)

    dense = loss(model)
    for gid in list(table)[:3]:
        group = pruner.groups.prunable[gid]
        count = min(table[gid])
        other = ImportancePruner()
        supernet = copy.deepcopy(model)
        other.prepare_from_supernet(supernet, data[0][0][:1])
        other.set_subnet({gid: group.keep_best(orders[gid], count)})
        slim = other.deploy_subnet(supernet, other.export_subnet())
        reestimate_bn_stats(slim, [x for x, _ in data])
        assert table[gid][count] == pytest.approx(loss(slim.eval()) - dense, abs=1e-5), gid


def test_prune_with_sensitivity_meets_the_budget_and_needs_data():
    model, data = resnet_data()
    x = data[0][0][:1]
    slim = razorlib.prune(model, x, flops=0.5, sensitivity=dict(steps=4), data=data)
    dense = get_model_complexity(model, x).flops
    assert get_model_complexity(slim, x).flops <= 0.5 * dense
    assert slim(x).shape == (1, 10)
    with pytest.raises(ValueError, match='pass data='):
        razorlib.prune(model, x, flops=0.5, sensitivity=True)
    with pytest.raises(ValueError, match='choose one allocation'):
        razorlib.prune(model, x, flops=0.5, sensitivity=True, global_ranking=True, data=data)


def test_bad_sensitivity_options_are_named():
    with pytest.raises(ValueError, match="sensitivity: unknown option 'step'; the options"):
        ImportancePruner(flops=0.5, sensitivity=dict(step=4))
    model, data = resnet_data()
    with pytest.raises(ValueError, match='sensitivity: steps must be an integer of at least 1, '
                       'got 0'):
        razorlib.prune(model, data[0][0][:1], flops=0.5, sensitivity=dict(steps=0), data=data)
    with pytest.raises(ValueError, match="got '5'"):
        razorlib.prune(model, data[0][0][:1], flops=0.5, sensitivity=dict(steps='5'), data=data)


def test_a_nan_loss_is_refused_not_ranked():
    # NaN losses compare false with every threshold: the allocation would cut every group
    # to its minimum and call it the budget
    model, data = resnet_data()
    nan = [(torch.full_like(x, float('nan')), y) for x, y in data]
    with pytest.raises(ValueError, match=r'sensitivity allocation: the loss on batch 0 \(the '
                       r'dense model\) is nan; check the data'):
        razorlib.prune(model, data[0][0][:1], flops=0.5, sensitivity=True, data=nan)
    pruner = ImportancePruner()
    pruner.prepare_from_supernet(copy.deepcopy(model), data[0][0][:1])
    gid = next(iter(pruner.channel_orders()))

    def loss(outputs, targets):  # finite on the dense model only
        full = all(mask.all() for mask in pruner.current_subnet.values())
        return F.cross_entropy(outputs, targets) * (1.0 if full else float('inf'))
    with pytest.raises(ValueError, match=f"the loss on batch 0 \\(group '{gid}' cut to 4 "
                       'channels\\) is inf'):  # 16 channels, steps=4: 4 is the first cut
        measure_sensitivity(pruner, {gid: pruner.channel_orders()[gid]}, data, loss, steps=4)
    assert all(mask.all() for mask in pruner.current_subnet.values())  # put back
