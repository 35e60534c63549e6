"""Batch-norm statistics: re-estimated on batches, refused when they come out NaN."""
import pytest
import torch
import torch.nn as nn
from doctest_helpers import assert_examples_pass

from razorlib.nas.ops.sliced import sliced_bn
from razorlib.utils.batch_norm import (averaging_running_stats, preserved_bn_stats,
                                       reestimate_bn_stats)


def net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Dropout(0.5),
                         nn.Conv2d(4, 4, 1), nn.BatchNorm2d(4, momentum=0.3))


def stats(model: nn.Module) -> list:
    return [t.clone() for n, t in model.state_dict().items() if 'running' in n]


def test_statistics_are_the_equal_weight_mean_over_the_batches():
    model = net().train()
    batches = [torch.randn(8, 3, 6, 6) + i for i in range(3)]
    assert reestimate_bn_stats(model, batches) == 3
    with torch.no_grad():
        pre = torch.cat([model[0](x) for x in batches])
    expected = pre.mean((0, 2, 3))
    assert torch.allclose(model[1].running_mean, expected, atol=1e-5)
    assert model.training and model[5].momentum == 0.3
    assert reestimate_bn_stats(model, batches, max_batches=1) == 1


def test_each_sample_counts_alike_a_short_trailing_batch_as_its_samples_do():
    # one sample after 8: weighed as much as the 8 together, the means were 1.10 and 0.95
    torch.manual_seed(0)
    bn = nn.BatchNorm2d(2, momentum=0.3)
    batches = [torch.randn(8, 2, 3, 3), torch.randn(1, 2, 3, 3) + 2]
    assert reestimate_bn_stats(bn, batches) == 2
    assert torch.allclose(bn.running_mean, torch.cat(batches).mean((0, 2, 3)), atol=1e-6)
    variances = [x.var((0, 2, 3), unbiased=True) for x in batches]  # each batch's, as torch
    assert torch.allclose(bn.running_var, (72 * variances[0] + 9 * variances[1]) / 81,
                          atol=1e-6)
    assert bn.momentum == 0.3 and bn.num_batches_tracked == 2 and not bn._forward_pre_hooks
    assert [round(v, 2) for v in bn.running_mean.tolist()] == [0.26, 0.24]


def test_batches_of_one_size_give_the_statistics_of_momentum_none_exactly():
    model = net()
    batches = [torch.randn(8, 3, 6, 6) + i for i in range(3)]
    reference = net().eval()  # no dropout
    for module in reference.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.momentum = None
            module.reset_running_stats()
            module.train()
    with torch.no_grad():
        for x in batches:
            reference(x)
    reestimate_bn_stats(model, batches)
    assert all(torch.equal(a, b) for a, b in zip(stats(model), stats(reference)))


class Unhooked(nn.Module):
    """A norm run without its hooks: razorlib's ``sliced_bn`` (a supernet's MBConv) or
    ``bn.forward(x)``."""

    def __init__(self, direct: bool):
        super().__init__()
        self.bn, self.direct = nn.BatchNorm2d(4), direct

    def forward(self, x):
        return self.bn.forward(x) if self.direct else sliced_bn(x, self.bn, 4)


@pytest.mark.parametrize('direct', [False, True])
def test_a_norm_run_without_its_hooks_still_averages_its_batches(direct):
    # with its own momentum 0.1 it kept a moving average from the reset 0: 1.7 for 5
    torch.manual_seed(0)
    batches = [torch.randn(8, 4, 3, 3) + 5 for _ in range(4)]
    model = Unhooked(direct)
    reestimate_bn_stats(model, batches)
    torch.testing.assert_close(model.bn.running_mean, torch.cat(batches).mean((0, 2, 3)))
    assert model.bn.momentum == 0.1


class PairNorm(nn.BatchNorm1d):
    """A subclass called on a tuple, or with its input by keyword after another."""

    def forward(self, pair=None, scale=1.0, input=None):
        x = pair[0] if pair is not None else input
        return super().forward(x) * scale


def test_a_norm_called_on_a_tuple_or_by_keyword_is_averaged():
    # the hook read the first argument's numel: a tuple or a float raised AttributeError
    # a tuple holds no tensor the hook can size, so its calls count alike (momentum None);
    # the tensor given by keyword weighs each call by its samples
    batches = [torch.randn(8, 3), torch.randn(2, 3) + 3]
    for call, expected in ((lambda bn, x: bn((x, None)), sum(b.mean(0) for b in batches) / 2),
                           (lambda bn, x: bn(scale=2.0, input=x), torch.cat(batches).mean(0))):
        bn = PairNorm(3).train()
        with torch.no_grad(), averaging_running_stats([bn]):
            for x in batches:
                call(bn, x)
        torch.testing.assert_close(bn.running_mean, expected)


def test_data_parallel_replicas_each_count_their_own_calls():
    # a replica shares the hooks (a shallow copy): one counter for both halved the weights
    bn = nn.BatchNorm1d(2).train()
    batches = [torch.randn(4, 2) + i for i in range(3)]
    with torch.no_grad(), averaging_running_stats([bn]):
        replica = bn._replicate_for_data_parallel()
        replica.weight, replica.bias = bn.weight, bn.bias  # as replicate() sets them
        replica.running_mean = bn.running_mean.clone()  # on another device
        replica.running_var = bn.running_var.clone()
        for x in batches:
            bn(x)
            replica(x + 10)
    torch.testing.assert_close(bn.running_mean, torch.cat(batches).mean(0))


def test_a_compiled_model_is_re_estimated_as_its_module():
    model, compiled = net(), torch.compile(net(), backend='eager')
    batches = [torch.randn(8, 3, 6, 6) + i for i in range(3)] + [torch.randn(2, 3, 6, 6)]
    reestimate_bn_stats(model, batches)
    reestimate_bn_stats(compiled, batches)
    assert all(torch.equal(a, b) for a, b in zip(stats(model), stats(compiled._orig_mod)))


class CompiledBody(nn.Module):
    """A norm in a compiled submodule: the model itself is no compiled module."""

    def __init__(self):
        super().__init__()
        self.body = torch.compile(nn.BatchNorm1d(2), backend='eager')

    def forward(self, x):
        return self.body(x)


def test_a_norm_in_a_compiled_submodule_is_averaged_as_in_eager():
    # dynamo replayed a graph with a stale momentum: the last batch's mean, 100 for 20
    torch.manual_seed(0)
    batches = [torch.randn(8, 2) + 10 * i for i in range(4)] + [torch.randn(2, 2) + 100]
    model = CompiledBody()
    reestimate_bn_stats(model, batches)
    torch.testing.assert_close(model.body._orig_mod.running_mean, torch.cat(batches).mean(0))


class HookedThenSliced(Unhooked):
    """The norm called through its module, then again on its buffers (``sliced_bn``)."""

    def forward(self, x):
        self.bn(x)
        self.momentum_seen = self.bn.momentum
        return sliced_bn(x + 1, self.bn, 4)


def test_a_call_without_the_hooks_after_one_with_them_meets_momentum_none():
    # the hooked call's momentum stayed: 1 after the first batch, only x + 1 was kept
    model = HookedThenSliced(direct=False)
    reestimate_bn_stats(model, [torch.randn(8, 4, 3, 3)])
    assert model.momentum_seen is None and model.bn.momentum == 0.1


class ChannelsLast(nn.BatchNorm1d):
    """A norm of ``(N, L, C)`` tokens: its channels are the last dim of its input."""

    def forward(self, x):
        return super().forward(x.transpose(1, 2)).transpose(1, 2)


def test_a_norm_with_its_channels_last_weighs_each_batch_by_its_positions():
    # counted by the input's dim 1 (L), a batch weighed N * C: 2.29 where 0.57 was right
    torch.manual_seed(0)
    batches = [torch.randn(4, 3, 2), torch.randn(2, 9, 2) + 2]
    bn = ChannelsLast(2)
    reestimate_bn_stats(bn, batches)
    torch.testing.assert_close(bn.running_mean, torch.cat([x.reshape(-1, 2) for x in batches])
                               .mean(0))


class Holder(nn.Module):
    """A module with an attribute named as a compiled module's original: no compiled one."""

    def __init__(self):
        super().__init__()
        self.body, self._orig_mod = net(), nn.BatchNorm2d(4)

    def forward(self, x):
        return self.body(x)


def test_only_a_compiled_module_is_run_as_its_original():
    # any module with an ``_orig_mod`` was swapped for it: the body was not re-estimated
    model = Holder()
    reestimate_bn_stats(model, [torch.randn(8, 3, 6, 6) + 5])
    assert model.body[1].running_mean.abs().sum() > 1


def test_norms_without_running_statistics_are_left_alone():
    free, tracked = nn.BatchNorm1d(2, track_running_stats=False), nn.BatchNorm1d(2)
    with torch.no_grad(), averaging_running_stats([free, tracked]):
        free.train()(torch.randn(4, 2))
        tracked.train()(torch.randn(4, 2) + 3)
    assert free.running_mean is None and tracked.running_mean.mean() > 1


def test_nan_or_no_batches_leave_the_statistics_as_they_were():
    model = net()
    reestimate_bn_stats(model, [torch.randn(8, 3, 6, 6)])
    before = stats(model)
    bad = torch.randn(8, 3, 6, 6)
    bad[0, 0, 0, 0] = float('nan')
    with pytest.raises(ValueError, match='NaN or infinite running statistics in 1, 5: the '
                       'batches hold NaN'):
        reestimate_bn_stats(model, [torch.randn(8, 3, 6, 6), bad])
    assert all(torch.equal(a, b) for a, b in zip(before, stats(model)))
    with pytest.raises(ValueError, match='no batch to run; the statistics are left'):
        reestimate_bn_stats(model, [])
    assert reestimate_bn_stats(model, [bad], max_batches=0) == 0
    assert all(torch.equal(a, b) for a, b in zip(before, stats(model)))


def test_an_error_in_the_forward_puts_the_statistics_back():
    model = net()
    before = stats(model)
    with pytest.raises(ValueError, match=r're-estimating batch norms: the model fails on data '
                       r'batch 1 \(inputs \(8, 5, 6, 6\)\): RuntimeError'):
        reestimate_bn_stats(model, [torch.randn(8, 3, 6, 6), torch.randn(8, 5, 6, 6)])
    assert all(torch.equal(a, b) for a, b in zip(before, stats(model)))
    with preserved_bn_stats(model):
        reestimate_bn_stats(model, [torch.randn(8, 3, 6, 6) + 3])
    assert all(torch.equal(a, b) for a, b in zip(before, stats(model)))


def test_examples():
    assert_examples_pass('razorlib.utils.batch_norm')


def _numpy_of(x: torch.Tensor) -> torch.Tensor:
    return x.numpy()  # TorchScript refuses it, in a message starting with a newline


class ScriptsItsTail(nn.Module):
    """A model that compiles part of its forward with TorchScript on the first call."""

    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm2d(3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.jit.script(_numpy_of)(self.bn(x))


@pytest.mark.filterwarnings('ignore::DeprecationWarning')  # torch.jit.script's
def test_an_error_whose_message_starts_with_a_newline_is_quoted_by_its_first_line():
    with pytest.raises(ValueError, match=r"batch 0 \(inputs \(2, 3, 4, 4\)\): RuntimeError: "
                                         r"'Tensor' object has no attribute or "
                                         r"method 'numpy'\.:$"):
        reestimate_bn_stats(ScriptsItsTail(), [torch.randn(2, 3, 4, 4)])
