"""What pruning reads from data= and loss_fn=: pairs and one finite loss, or a named error."""
import pytest
import torch
import torch.nn as nn

import razorlib
from razorlib.pruning.data import batch_loss, checked_loss, pair_batches

X = torch.randn(4, 3, 8, 8)
Y = torch.zeros(4, dtype=torch.long)


def net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))


def test_pairs_are_read_once_and_other_batches_are_named():
    once = iter([(X, Y), [X, Y]])
    batches = pair_batches(once, 'who')
    assert len(batches) == 2 and all(b[0] is X and b[1] is Y for b in batches)
    with pytest.raises(ValueError, match='who is computed from data: pass data='):
        pair_batches(None, 'who')
    with pytest.raises(ValueError, match='who: data= holds no batch'):
        pair_batches([], 'who')
    with pytest.raises(ValueError, match=r"who: data batch 1 is a dict \(keys 'inputs', "
                       r"'data_samples'\), not an \(inputs, targets\) pair; map it, e\.g\. "
                       r"data=\[\(b\['inputs'\], b\['data_samples'\]\) for b in loader\]"):
        pair_batches([(X, Y), {'inputs': X, 'data_samples': Y}], 'who')
    with pytest.raises(ValueError, match='who: data batch 0 is a Tensor, not an'):
        pair_batches([X], 'who')
    with pytest.raises(ValueError, match='who: data batch 0 is a tuple of 3, not an'):
        pair_batches([(X, Y, Y)], 'who')


def test_a_loss_must_be_one_finite_number():
    assert checked_loss(torch.tensor([[2.0]]), 'who').shape == ()
    with pytest.raises(ValueError, match=r'who: loss_fn\(outputs, targets\) must return one '
                       r'number \(a scalar tensor\); it returned a shape \(4, 4\) on batch 3'):
        checked_loss(torch.zeros(4, 4), 'who', ' on batch 3')
    with pytest.raises(ValueError, match='returned a float'):
        checked_loss(0.5, 'who')
    with pytest.raises(ValueError, match='who: the loss on batch 0 is inf; check the data'):
        checked_loss(torch.tensor(float('inf')), 'who', ' on batch 0')


def test_an_error_in_loss_fn_keeps_its_type_and_says_who_called_it():
    with pytest.raises(IndexError) as info:
        batch_loss(None, torch.zeros(4, 4), torch.full((4, ), 8), "importance 'taylor'",
                   ' on batch 2')
    assert info.value.__notes__ == [
        "importance 'taylor': raised by loss_fn(outputs, targets) on batch 2"]


@pytest.mark.parametrize('importance', ['taylor', 'fisher'])
def test_gradient_criteria_refuse_a_nan_loss(importance):
    nan = [(torch.full_like(X, float('nan')), Y)]
    with pytest.raises(ValueError, match=f"importance '{importance}': the loss is nan"):
        razorlib.prune(net(), X[:1], flops=0.5, importance=importance, data=nan)


def test_activation_scores_that_are_nan_are_refused_naming_the_group():
    nan = [(torch.full_like(X, float('nan')), Y)]
    with pytest.raises(ValueError, match=r"ActivationImportance\(.*\) scored channels of group "
                       r"'0' \(layers 0\) NaN or infinite"):
        razorlib.prune(net(), X[:1], flops=0.5, importance='activation', data=nan)


def test_prune_checks_its_data_before_it_changes_anything():
    model = net()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match=r"razorlib.prune: data batch 0 is a dict \(keys 'x'"):
        razorlib.prune(model, X[:1], flops=0.5, data=[{'x': X, 'y': Y}])
    with pytest.raises(ValueError, match='re-estimating batch norms gave NaN or infinite '
                       'running statistics in 1: the batches hold NaN'):
        razorlib.prune(model, X[:1], flops=0.5, data=[(torch.full_like(X, float('inf')), Y)])
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


@pytest.mark.parametrize('importance, who', [('taylor', "importance 'taylor'"),
                                             ('activation', "importance 'activation'"),
                                             ('l1', 're-estimating batch norms')])
def test_batches_the_model_cannot_run_are_named(importance, who):
    """The masked model's layer refuses them in its mask (a MaskedInputError), the slim
    one's in its own forward (a RuntimeError)."""
    wrong = [(torch.randn(2, 5, 8, 8), Y[:2])]  # 5 channels for a 3-channel conv
    model = net()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match=rf'^{who}: the model fails on data batch 0 \(inputs '
                       r'\(2, 5, 8, 8\)\): (MaskedInputError|RuntimeError): '):
        razorlib.prune(model, X, ratio=0.5, importance=importance, data=wrong)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())


def test_a_refused_budget_names_the_groups_the_criterion_does_not_score():
    mlp = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    with pytest.raises(ValueError, match=r'flops=0.5 cannot be met: .* 2 prunable group\(s\) '
                       r'the criterion does not score stay whole \(0, 2\)\. Nothing was changed'):
        razorlib.prune(mlp, torch.randn(4, 6), flops=0.5, importance='bn_scale')
