"""The latency search at its edges, on scripted (deterministic) measurements: a smallest
subnet above the budget but within its tolerance, a noisy first measurement of the
smallest subnet, one no faster than the dense model, and rules that leave nothing to
prune."""
import re
from types import SimpleNamespace

import pytest
import torch
from latency_fakes import ParamsRuntime, net

import razorlib
from razorlib.pruning.latency_search import REFUSAL_MEASUREMENTS, search_latency

X = torch.randn(1, 3, 16, 16)


class ScriptedTimer:
    """Candidate ``i`` (``subnet`` is the identity) runs at ``fraction(i)`` of the dense
    model's 10 ms; ``first`` overrides the smallest candidate's first measurements."""

    def __init__(self, fraction, size, first=(), tolerance=0.02):
        self.fraction, self.size, self.first = fraction, size, list(first)
        self.tolerance, self.max_measurements = tolerance, 10
        self.runtime = SimpleNamespace(name='scripted')
        self.measured = []

    def measure(self, keeps):
        self.measured.append(list(keeps))
        out = []
        for index in keeps:
            value = self.fraction(index)
            if index == 0 and self.first:
                value = self.first.pop(0)
            out.append(10.0 * value)
        return out

    def predicted_sum(self, index):
        return self.fraction(index)


def linear(size, low):
    return lambda i: low + (1 - low) * i / size


def identity(i):
    return i


@pytest.mark.parametrize('above', [1.001, 1.01, 1.019])
def test_the_smallest_subnet_within_the_tolerance_above_the_budget_is_chosen(above):
    low, size = 0.3, 100
    timer = ScriptedTimer(linear(size, low), size)
    choice = search_latency(timer, identity, size, low / above)
    assert choice.index == 0 and choice.fraction == pytest.approx(low)
    assert len(timer.measured) == 1  # nothing more to measure: nothing smaller is allowed


def test_the_smallest_subnet_beyond_the_tolerance_is_refused_with_its_fraction():
    timer = ScriptedTimer(linear(100, 0.3), 100)
    with pytest.raises(ValueError, match=r'latency=0.29 cannot be met on scripted: .* runs '
                       r'at 0\.3000 .*ask for latency>=0\.300'):
        search_latency(timer, identity, 100, 0.29)
    assert len(timer.measured) == REFUSAL_MEASUREMENTS  # measured again before refusing


@pytest.mark.parametrize('first', [[1.02], [1.0], [0.95]])
def test_a_noisy_first_measurement_of_the_smallest_subnet_is_measured_again(first):
    size = 100
    timer = ScriptedTimer(linear(size, 0.3), size, first=first)
    choice = search_latency(timer, identity, size, 0.5)
    # two more looks: the median of three, not one outlier (nor a mean it drags), decides
    assert choice.measured[0] == [first[0], 0.3, 0.3]
    assert len(choice.measured[0]) == REFUSAL_MEASUREMENTS
    assert 0.5 * 0.98 <= choice.fraction <= 0.5 * 1.02


def test_a_subnet_no_faster_than_the_dense_model_is_refused_without_a_budget_above_one():
    timer = ScriptedTimer(lambda i: 1.004, 10)  # every candidate as slow as the dense model
    with pytest.raises(ValueError) as err:
        search_latency(timer, identity, 10, 0.9)
    message = str(err.value)
    assert 'median of 3 measurements' in message
    assert 'does not make the model measurably faster on scripted' in message
    assert 'latency>=' not in message


def test_prune_meets_a_budget_just_below_the_smallest_subnet_within_the_tolerance():
    with pytest.raises(ValueError) as err:
        razorlib.prune(net(), X, latency=0.01, runtime=ParamsRuntime(cache_dir=False))
    low = float(re.search(r'runs at ([0-9.]+)', str(err.value)).group(1))
    for target in (low * 0.995, low * 0.985):  # the max() of nothing before
        slim = razorlib.prune(net(), X, latency=target, runtime=ParamsRuntime(cache_dir=False))
        assert slim[0].out_channels < 32


def test_rules_that_leave_nothing_to_prune_are_refused_before_measuring():
    runtime = ParamsRuntime(cache_dir=False)
    with pytest.raises(ValueError, match=r'latency=0.5 cannot be met: nothing can be pruned '
                       r'under the given rules \(.*round_to=64\)'):
        razorlib.prune(net(), X, latency=0.5, runtime=runtime, round_to=64)
    assert runtime.calls == 0
    slim = razorlib.prune(net(), X, latency=1.0, runtime=runtime, round_to=64)  # met whole
    assert slim[0].out_channels == 32


@pytest.mark.parametrize('target', [1.0, 0.99])
def test_a_budget_the_dense_model_meets_is_never_refused(target):
    timer = ScriptedTimer(lambda i: 1.05, 10)  # the smallest measured slower than dense
    choice = search_latency(timer, identity, 10, target)
    assert choice.index == 10 and choice.fraction == 1.0 and len(timer.measured) == 1
