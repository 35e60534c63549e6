"""razorlib.prune(data=...): the batch norms' running statistics are re-estimated on the
data after slicing; a norm no batch reaches (a branch taken in train mode only) keeps
the statistics it had, with a warning, instead of a mean of 0 and a variance of 1."""
import warnings

import torch
import torch.nn as nn

import razorlib
from razorlib.utils import reestimate_bn_stats


class AuxHead(nn.Module):
    """A trunk, and an auxiliary head (its own batch norm) run only in train mode, as
    Inception's and GoogLeNet's."""

    def __init__(self):
        super().__init__()
        self.stem, self.bn = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.aux, self.aux_bn = nn.Conv2d(8, 6, 1), nn.BatchNorm2d(6)
        self.head, self.aux_head = nn.Linear(8, 4), nn.Linear(6, 4)

    def forward(self, x):
        x = torch.relu(self.bn(self.stem(x)))
        out = self.head(x.mean((2, 3)))
        if self.training:
            out = out + self.aux_head(torch.relu(self.aux_bn(self.aux(x))).mean((2, 3)))
        return out


def trained():
    """An AuxHead in train mode whose norms counted 3 batches: statistics of their own."""
    torch.manual_seed(0)
    model = AuxHead().train()
    with torch.no_grad():
        for _ in range(3):
            model(torch.randn(8, 3, 6, 6) * 2 + 3)
    return model


def test_a_norm_no_batch_reaches_keeps_its_statistics_sliced_with_a_warning():
    model = trained()
    data = [(torch.randn(4, 3, 6, 6) * 2 + 3, torch.zeros(4, dtype=torch.long))] * 2
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        slim = razorlib.prune(model, torch.randn(2, 3, 6, 6), ratio=0.5, data=data)
    said = [str(w.message) for w in caught if 'ran on none' in str(w.message)]
    assert said == ['re-estimating batch norms: aux_bn ran on none of the 2 batch(es) (a '
                    'branch the model takes in train mode only, or not on these inputs): '
                    'their running statistics are left as they were, not re-estimated']
    # the statistics it had (the tracer runs the model in eval mode: the head is not
    # pruned), not the reset mean 0 and variance 1
    assert all(torch.equal(v, model.aux_bn.state_dict()[k])
               for k, v in slim.aux_bn.state_dict().items())
    assert slim.aux_bn.num_batches_tracked.item() == 3
    # the trunk's norm was re-estimated: 2 batches counted, not the 3 trained
    assert slim.bn.num_features == 4 and slim.bn.num_batches_tracked.item() == 2
    assert slim.training and slim.aux_bn.training


def test_reestimating_leaves_a_norm_the_eval_forward_skips_as_it_was():
    model = trained().eval()
    before = {k: v.clone() for k, v in model.aux_bn.state_dict().items()}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        assert reestimate_bn_stats(model, [torch.randn(4, 3, 6, 6)]) == 1
    assert [str(w.message).split(' ran')[0] for w in caught] == [
        're-estimating batch norms: aux_bn']
    assert all(torch.equal(v, before[k]) for k, v in model.aux_bn.state_dict().items())
    assert model.bn.num_batches_tracked.item() == 1 and not model.training


def test_a_fresh_norm_every_batch_reaches_is_re_estimated_without_a_warning():
    model = nn.Sequential(nn.Conv2d(3, 4, 1), nn.BatchNorm2d(4)).eval()
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        assert reestimate_bn_stats(model, [torch.randn(4, 3, 6, 6) + 2] * 3) == 3
    assert model[1].num_batches_tracked.item() == 3 and model[1].running_var.ne(1).all()
