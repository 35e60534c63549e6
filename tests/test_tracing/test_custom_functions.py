"""A custom ``torch.autograd.Function`` leaves a ``<Name>Backward`` node no rule knows: the
channels that reach it freeze (``unknown-op``), and so do the parameters it reads, named
(``tracing/literal_sizes.py``, ``freeze_params_of_opaque_ops``).

Before, only its input channels froze: a parameter sliced with another group (a layer's
weight, or ``alpha`` in ``a * alpha[:, None, None]``) that the Function read, passed to
``apply`` or read in its forward from a module, reached it sliced in the slim model, which
silently computed something else (``x * alpha.sum()``), the pruned run included.
"""
import pytest
import torch
import torch.nn as nn

from helpers import Traced
from masked_vs_slim import sample_and_deploy
from test_untracked_params import Net as UntrackedNet
from razorlib.pruning import L1NormPruner
from razorlib.registry import TRACING_RULES
from razorlib.tracing import TracingError
from razorlib.tracing.rules import PASS

X = torch.randn(2, 3, 8, 8)
RULE_TABLE = 'this grad_fn is not in the channel rule table'


class ScaleBySum(torch.autograd.Function):
    """``x * weight.sum()``, ``weight`` passed to ``apply``."""

    @staticmethod
    def forward(ctx, x, weight):
        ctx.save_for_backward(weight)
        return x * weight.sum()

    @staticmethod
    def backward(ctx, grad):
        (weight, ) = ctx.saved_tensors
        return grad * weight.sum(), None


class ScaleByAlpha(torch.autograd.Function):
    """``x * module.alpha.sum()``: the parameter is read from the module in the forward."""

    @staticmethod
    def forward(ctx, x, module):
        return x * module.alpha.sum()

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class ShiftByBias(torch.autograd.Function):
    """``x + module.a.bias.mean()``: a layer's bias read from a module in the forward."""

    @staticmethod
    def forward(ctx, x, module):
        return x + module.a.bias.mean()

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class Net(UntrackedNet):
    """test_untracked_params' a, b, head and alpha, and a second head; ``step`` maps the
    input to the output, which is pooled."""

    def __init__(self, step):
        super().__init__(step)
        self.head2 = nn.Conv2d(8, 4, 1)

    def forward(self, x):
        return self.step(self, x).mean((2, 3))


def _scaled_a(m, x):
    """a's channels, with alpha sliced with them."""
    return m.head(m.a(x) * m.alpha[:, None, None])


#: b's channels reach the Function; a parameter it reads is sliced with a's group.
READS = {
    'alpha passed to apply': (lambda m, x: _scaled_a(m, x)
                              + m.head2(ScaleBySum.apply(m.b(x), m.alpha)),
                              'unknown-op', 'ScaleBySumBackward',
                              f'{RULE_TABLE} and reads alpha'),
    "a layer's weight passed to apply": (lambda m, x: m.head(m.a(x))
                                         + m.head2(ScaleBySum.apply(m.b(x), m.a.weight)),
                                         'unknown-op', 'ScaleBySumBackward',
                                         f'{RULE_TABLE} and reads a.weight'),
    'alpha read from the module': (lambda m, x: _scaled_a(m, x)
                                   + m.head2(ScaleByAlpha.apply(m.b(x), m)),
                                   'untracked', 'ScaleByAlphaBackward',
                                   'this custom autograd.Function computes its output from '
                                   'alpha in its forward, where no rule sees it'),
    "a layer's bias read from the module": (lambda m, x: m.head(m.a(x))
                                            + m.head2(ShiftByBias.apply(m.b(x), m)),
                                            'untracked', 'ShiftByBiasBackward',
                                            'this custom autograd.Function computes its '
                                            'output from a.bias in its forward, where no '
                                            'rule sees it'),
}


def _net(step):
    torch.manual_seed(0)
    return Net(step).eval()


@pytest.mark.parametrize('case', READS)
def test_a_parameter_the_function_reads_freezes_naming_op_and_parameter(case):
    step, kind, op, message = READS[case]
    traced = Traced(_net(step), X)
    (reason, ) = [r for r in traced.reasons('a') if r.kind == kind]
    assert (reason.op, reason.message) == (op, f'{message}: its entries cannot follow their '
                                               'pruning')
    assert traced.reasons('b')[0].kind == 'unknown-op'  # its input, as before


@pytest.mark.parametrize('case', READS)
def test_the_pruned_model_computes_what_the_masked_one_does(case):
    model = _net(READS[case][0])
    pruner = L1NormPruner(ratio=0.5, verify=False)  # the trace alone must be right
    pruner.prepare_from_supernet(model, X)
    assert list(pruner.groups.prunable) == []
    slim = sample_and_deploy(pruner, model, X)
    assert (slim.a.out_channels, slim.alpha.shape) == (8, (8, ))


def _read_detached(m, x):
    return _scaled_a(m, x) * ScaleByAlpha.apply(m.b(x), m).detach().mean()


def _returned(m, x):
    """The Function's output is the model output (pooled by ``Net``)."""
    return ScaleByAlpha.apply(_scaled_a(m, x), m)


#: Wherever the Function's output goes, what its forward read is found.
USES_OF_THE_OUTPUT = {
    'the data of a conv': READS['alpha read from the module'][0],
    'an operand of an add': lambda m, x: _scaled_a(m, x)
    + ScaleByAlpha.apply(m.head2(m.b(x)), m),
    'read through detach': _read_detached,
    'the model output': _returned,
}


@pytest.mark.parametrize('case', USES_OF_THE_OUTPUT)
def test_what_the_forward_read_is_found_wherever_its_output_goes(case):
    traced = Traced(_net(USES_OF_THE_OUTPUT[case]), X)
    assert [r.op for r in traced.reasons('a') if r.kind == 'untracked'] == \
        ['ScaleByAlphaBackward']


def test_a_parameter_only_the_function_reads_freezes_nothing_more():
    """alpha is never sliced: a prunes, only b's channels (its input) freeze."""
    model = _net(lambda m, x: m.head(m.a(x)) + m.head2(ScaleByAlpha.apply(m.b(x), m)))
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, X)
    assert list(pruner.groups.prunable) == ['a']
    assert sample_and_deploy(pruner, model, X).a.out_channels == 4


@pytest.fixture
def scale_by_alpha_passes():
    """A rule registered for ``ScaleByAlphaBackward``: its input's channels pass."""
    TRACING_RULES.register_module('ScaleByAlphaBackward', module=PASS)
    yield
    TRACING_RULES.module_dict.pop('ScaleByAlphaBackward')


@pytest.mark.usefixtures('scale_by_alpha_passes')
def test_a_rule_for_the_function_does_not_follow_what_its_forward_reads():
    traced = Traced(_net(READS['alpha read from the module'][0]), X)
    assert [(r.kind, r.op) for r in traced.reasons('a')] == [
        ('untracked', 'ScaleByAlphaBackward')]
    assert traced.group_of('b').prunable


@pytest.mark.usefixtures('scale_by_alpha_passes')
def test_strict_raises_naming_op_and_parameter():
    with pytest.raises(TracingError, match=r'\[untracked\] ScaleByAlphaBackward: this custom '
                                           r'autograd.Function computes its output from alpha'):
        Traced(_net(READS['alpha read from the module'][0]), X, strict=True)


def test_a_dropped_result_is_not_walked_but_its_inputs_are_checked():
    """Nothing uses the result, so the walk never meets its node: the Function still runs
    on a's pruned channels, whose torch calls in its forward make them size-dependent
    (the pruned run checks them)."""
    def step(m, x):
        y = m.a(x)
        ScaleBySum.apply(y, m.alpha)
        return m.head(y)
    traced = Traced(_net(step), X)
    assert 'ScaleBySumBackward' not in traced.graph.op_counts
    assert set(traced.uses[('a', 'out')].slots) <= set(traced.graph.size_dependent)
