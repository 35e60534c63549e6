"""What pruning reads from data= and loss_fn=: pairs and one finite loss, or a named error."""
import gc
import weakref

import pytest
import torch
import torch.nn as nn

import razorlib
from razorlib.pruning import ImportancePruner
from razorlib.pruning.data import batch_loss, batch_samples, checked_loss, pair_batches
from razorlib.pruning.sensitivity import _mean_loss

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
    with pytest.raises(ValueError, match='who: data= holds no batch'):
        pair_batches(iter([]), 'who')
    dict_batch = (r"who: data batch 1 is a dict \(keys 'inputs', 'data_samples'\), not an "
                  r"\(inputs, targets\) pair; map it, e\.g\. data=\[\(b\['inputs'\], "
                  r"b\['data_samples'\]\) for b in loader\]")
    data = [(X, Y), {'inputs': X, 'data_samples': Y}]
    for read_now in (iter(data), data, tuple(data)):  # read once, or in memory already
        with pytest.raises(ValueError, match=dict_batch):
            pair_batches(read_now, 'who')
    with pytest.raises(ValueError, match='who: data batch 0 is a Tensor, not an'):
        pair_batches([X], 'who')
    with pytest.raises(ValueError, match='who: data batch 0 is a tuple of 3, not an'):
        pair_batches([(X, Y, Y)], 'who')


class Loader:
    """A re-iterable that makes its batches as they are read, as a DataLoader does, and
    keeps a weak reference to each."""

    def __init__(self, sizes, bad=None, passes=None):
        self.sizes, self.bad, self.passes = sizes, bad, passes
        self.made = []

    def __iter__(self):
        if self.passes is not None:
            if not self.passes:
                return
            self.passes -= 1
        for index, size in enumerate(self.sizes):
            batch = (torch.randn(size, 3, 8, 8), torch.zeros(size, dtype=torch.long))
            self.made.append(weakref.ref(batch[0]))
            yield {'x': batch[0]} if index == self.bad else batch


def test_a_re_iterable_is_read_again_on_each_pass_and_not_held():
    loader = Loader([4, 4, 1])
    batches = pair_batches(loader, 'who')
    assert len(loader.made) == 1  # its first batch checked now, to refuse bad data early
    assert [x.shape[0] for x, _ in batches] == [4, 4, 1]  # the pass begun goes on
    assert [x.shape[0] for x, _ in batches] == [4, 4, 1]
    assert len(loader.made) == 6
    gc.collect()
    assert not [ref for ref in loader.made if ref() is not None]  # no batch kept
    assert isinstance(pair_batches(iter(Loader([2])), 'who'), list)  # read once, kept


def test_a_re_iterable_is_checked_as_each_pass_reads_it():
    with pytest.raises(ValueError, match=r'who: data batch 0 is a dict'):
        pair_batches(Loader([4, 4], bad=0), 'who')
    with pytest.raises(ValueError, match=r'who: data batch 2 is a dict'):
        list(pair_batches(Loader([4, 4, 4], bad=2), 'who'))
    model = net().train()
    pruner = ImportancePruner(importance='taylor')
    pruner.prepare_from_supernet(model, X[:1])
    state = {k: v.clone() for k, v in model.state_dict().items()}
    hooks = [(list(m._forward_hooks), list(m._forward_pre_hooks)) for m in model.modules()]
    with pytest.raises(ValueError, match=r"importance 'taylor': data batch 2 is a dict"):
        pruner.score(Loader([4, 4, 4], bad=2))
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in state.items())
    assert all(m.training for m in model.modules())
    assert hooks == [(list(m._forward_hooks), list(m._forward_pre_hooks))
                     for m in model.modules()]
    once = pair_batches(Loader([4], passes=1), 'who')
    assert len(list(once)) == 1
    with pytest.raises(ValueError, match=r'who: data= holds no batch on a later pass: a list '
                       'or a DataLoader is read again on every pass, an iterator only once'):
        list(once)


def test_prune_reads_a_data_loader_as_it_reads_a_list_of_its_batches():
    dataset = torch.utils.data.TensorDataset(torch.randn(10, 3, 8, 8),
                                             torch.randint(0, 4, (10, )))
    loader = torch.utils.data.DataLoader(dataset, batch_size=4)
    for importance in ('taylor', 'activation'):
        slims = [razorlib.prune(net(), X[:1], flops=0.5, importance=importance, data=data)
                 for data in (loader, list(loader))]
        states = [slim.state_dict() for slim in slims]
        assert all(torch.equal(states[0][k], states[1][k]) for k in states[1]), importance
    model = net()
    with pytest.raises(ValueError, match=r'razorlib.prune: data batch 1 is a dict'):
        razorlib.prune(model, X[:1], flops=0.5, data=Loader([4, 4], bad=1))
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(),
                                                 net().state_dict().values()))


def test_a_batch_counts_its_inputs_samples_where_its_targets_agree():
    assert batch_samples((X, Y)) == 4
    assert batch_samples(({'ids': torch.zeros(6, 2)}, None)) == 6
    assert batch_samples(({'ids': torch.zeros(2, 5)}, torch.zeros(2, 5))) == 2  # token ids
    assert batch_samples((X, [{'boxes': torch.zeros(n, 4)} for n in (0, 9, 1, 2)])) == 4
    assert batch_samples((X, {'labels': Y})) == 4
    assert batch_samples((X, (Y, torch.zeros(4, 2)))) == 4  # several targets per sample
    # targets that do not say: a time-major (T, B) target, a leading shared table, none
    assert batch_samples((X, torch.zeros(20, 4))) is None
    assert batch_samples(((torch.zeros(100, 8), X), Y)) is None
    assert batch_samples((X, torch.empty(0))) is None
    assert batch_samples(((1.0, torch.zeros(())), [0, 1])) is None


def test_a_loss_must_be_one_finite_number():
    assert checked_loss(torch.tensor([[2.0]]), 'who').shape == ()
    with pytest.raises(ValueError, match=r'who: loss_fn\(outputs, targets\) must return one '
                       r'number \(a scalar tensor\); it returned a shape \(4, 4\) on batch 3'):
        checked_loss(torch.zeros(4, 4), 'who', ' on batch 3')
    with pytest.raises(ValueError, match='returned 0.5 of type float$'):  # was 'a float'
        checked_loss(0.5, 'who')
    with pytest.raises(ValueError, match='returned 3 of type int$'):  # was 'a int'
        checked_loss(3, 'who')
    with pytest.raises(ValueError, match='who: the loss on batch 0 is inf; check the data'):
        checked_loss(torch.tensor(float('inf')), 'who', ' on batch 0')


def test_an_error_in_loss_fn_keeps_its_type_and_says_who_called_it():
    with pytest.raises(IndexError) as info:
        batch_loss(None, torch.zeros(4, 4), torch.full((4, ), 8), "importance 'taylor'",
                   ' on batch 2')
    assert info.value.__notes__ == [
        "importance 'taylor': raised by loss_fn(outputs, targets) on batch 2"]


@pytest.mark.parametrize('importance', ['taylor', 'fisher'])
def test_gradient_criteria_refuse_a_nan_loss_naming_the_batch(importance):
    nan = [(X, Y), (torch.full_like(X, float('nan')), Y)]
    with pytest.raises(ValueError, match=f"importance '{importance}': the loss on batch 1 is "
                       'nan'):
        razorlib.prune(net(), X[:1], flops=0.5, importance=importance, data=nan)
    with pytest.raises(ValueError, match=f"importance '{importance}': loss_fn.* must return one "
                       r'number \(a scalar tensor\); it returned a shape \(4, 4\) on batch 0'):
        razorlib.prune(net(), X[:1], flops=0.5, importance=importance, data=nan,
                       loss_fn=lambda outputs, targets: outputs)


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


@pytest.mark.parametrize('importance', ['taylor', 'fisher', 'activation'])
def test_prune_reads_a_data_loader_once_per_pass_and_no_batch_more(importance):
    loader = Loader([4, 4, 1])
    razorlib.prune(net(), X[:1], flops=0.5, importance=importance, data=loader)
    # the criterion's pass and the batch norms' re-estimation: no pass begun for nothing
    assert len(loader.made) == 2 * 3


def test_a_sensitivity_allocation_reads_a_data_loader_once_for_scores_and_cuts():
    # scores and cuts read it a pass each: another shuffle of a DataLoader for each
    loader = Loader([4, 4, 1])
    razorlib.prune(net(), X[:1], flops=0.5, importance='taylor', sensitivity=True,
                   data=loader)
    assert len(loader.made) == 2 * 3  # allocation (scores and cuts), batch norms


def test_a_sensitivity_loss_with_batches_of_unknown_size_weighs_them_alike():
    # empty targets gave 0 samples each and a ZeroDivisionError
    three_ones = (torch.ones(3, 1), torch.empty(0))
    a_five = (torch.full((1, 1), 5.0), torch.empty(0))  # known sizes would give 2.0
    assert _mean_loss(nn.Identity(), [three_ones, a_five], lambda out, _: out.mean(), '') == 3.0
    data = [(torch.randn(4, 3, 8, 8), torch.empty(0)) for _ in range(2)]
    slim = razorlib.prune(net(), X[:1], ratio=0.5, data=data, sensitivity=True,
                          loss_fn=lambda outputs, _: outputs.pow(2).mean())
    assert sum(p.numel() for p in slim.parameters()) < sum(p.numel() for p in net().parameters())
