"""Every name in the rule table is one torch 2.13 emits, and its rule does what it says."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from helpers import Traced
from op_catalog import (ALONG_DIM_OPS, BIND_OPS, MIXING_OPS, NOT_ON_CPU, PASS_OPS,
                        REDUCE_ALL_OPS, REDUCE_CHANNEL_OPS, REDUCE_SPATIAL_OPS)
from razorlib.tracing import RULES, TracingError

# Table names with dedicated tests in test_shape_rules.py / test_layer_rules.py /
# test_heads.py.
DEDICATED = {
    'AddmmBackward0', 'BmmBackward0', 'CatBackward0', 'ConvolutionBackward0',
    'EmbeddingBackward0', 'ExpandBackward0', 'FlipBackward0', 'MmBackward0',
    'NativeBatchNormBackward0', 'NativeGroupNormBackward0', 'NativeLayerNormBackward0',
    'PermuteBackward0', 'PreluKernelBackward0', 'RepeatBackward0', 'SelectBackward0',
    'SliceBackward0', 'SplitBackward0', 'SplitWithSizesBackward0', 'SqueezeBackward0',
    'SqueezeBackward1', 'SqueezeBackward2', 'StackBackward0', 'TBackward0',
    'TransposeBackward0', 'UnbindBackward0', 'UnsafeViewBackward0', 'UnsqueezeBackward0',
    'ReshapeAliasBackward0', 'ViewBackward0', 'ChannelShuffleBackward0',
    'ScaledDotProductFlashAttentionForCpuBackward0',  # test_heads.py
    'ViewAsComplexBackward0', 'ViewAsRealBackward0',  # test_integrations/test_hf_llama4.py
    'IndexAddBackward0',  # test_nn/test_experts.py
    'RollBackward0',  # test_roll.py
    'torch::autograd::CopyBackwards',  # test_integrations/test_hf_mamba.py
}
X = torch.randn(1, 3, 6, 6)


class OpNet(nn.Module):
    """conv ``a`` (and ``b`` for binary ops) -> op -> global mean -> Linear head."""

    def __init__(self, op, binary=False, head=True):
        super().__init__()
        self.op, self.binary = op, binary
        self.a = nn.Conv2d(3, 8, 1)
        self.b = nn.Conv2d(3, 8, 1) if binary else None
        self.head = nn.Linear(8, 2) if head else None

    def forward(self, x):
        y = self.op(self.a(x), self.b(x)) if self.binary else self.op(self.a(x))
        return self.head(y.reshape(1, 8, -1).mean(2)) if self.head else y


def test_every_table_name_is_tested():
    catalog = set().union(PASS_OPS, BIND_OPS, REDUCE_SPATIAL_OPS, REDUCE_CHANNEL_OPS,
                          REDUCE_ALL_OPS, MIXING_OPS, ALONG_DIM_OPS)
    assert set(RULES) - catalog - NOT_ON_CPU - DEDICATED == set()


@pytest.mark.parametrize('name,op', sorted({**PASS_OPS, **REDUCE_SPATIAL_OPS, **MIXING_OPS,
                                            **REDUCE_ALL_OPS}.items()))
def test_catalog_op_emits_its_name(name, op):
    x = torch.randn(1, 8, 6, 6, requires_grad=True)
    assert op(x).grad_fn.name() == name


@pytest.mark.parametrize('name,op', sorted(BIND_OPS.items()))
def test_catalog_binary_op_emits_its_name(name, op):
    x = torch.randn(1, 8, 6, 6, requires_grad=True)
    assert op(x, x * 2).grad_fn.name() == name


@pytest.mark.parametrize('name,op', sorted(PASS_OPS.items()))
def test_pass_rule_keeps_channels(name, op):
    traced = Traced(OpNet(op), X)
    group = traced.group_of('a')
    assert group.prunable, group
    assert 'head' in group.consumers
    assert (traced.classes('head', 'in') == traced.classes('a')).all()


@pytest.mark.parametrize('name,op', sorted(BIND_OPS.items()))
def test_bind_rule_binds_both_operands(name, op):
    traced = Traced(OpNet(op, binary=True), X)
    group = traced.group_of('a')
    assert group.prunable and set(group.layers) == {'a', 'b'}
    assert (traced.classes('a') == traced.classes('b')).all()


@pytest.mark.parametrize('name,op', sorted(REDUCE_SPATIAL_OPS.items()))
def test_spatial_reduction_keeps_channels(name, op):
    traced = Traced(OpNet(op), X)
    assert traced.group_of('a').prunable
    assert (traced.classes('head', 'in') == traced.classes('a')).all()


@pytest.mark.parametrize('name,op', sorted(REDUCE_CHANNEL_OPS.items()))
def test_inexact_reduction_over_channels_freezes(name, op):
    traced = Traced(OpNet(op, head=False), X)
    reasons = traced.reasons('a')
    assert [(r.kind, r.op) for r in reasons] == [('mixing', name)]
    assert 'channel dim 1' in reasons[0].message


def test_sum_over_channels_is_exact_and_keeps_the_producer_prunable():
    traced = Traced(OpNet(lambda x: x.sum(1), head=False), X)
    assert traced.group_of('a').prunable


@pytest.mark.parametrize('name,op', sorted(REDUCE_ALL_OPS.items()))
def test_full_reduction(name, op):
    traced = Traced(OpNet(op, head=False), X)
    assert traced.group_of('a').prunable == name.startswith('Sum')


@pytest.mark.parametrize('name,op', sorted(MIXING_OPS.items()))
def test_mixing_op_freezes_its_input_channels(name, op):
    traced = Traced(OpNet(lambda y: op(y).sum(), head=False), X, meta=False)
    assert ('mixing', name) in [(r.kind, r.op) for r in traced.reasons('a')]


@pytest.mark.parametrize('name,op', sorted(ALONG_DIM_OPS.items()))
def test_along_dim_ops(name, op):
    over_channels = Traced(OpNet(lambda y: op(y, 1)), X)
    assert [r.op for r in over_channels.reasons('a')] == [name]
    over_space = Traced(OpNet(lambda y: op(y, -1)), X)
    assert over_space.group_of('a').prunable


#: Per-channel ops that keep the channel dim's size but move values along it.
ALONG_CHANNELS = {
    'roll flattened': (lambda y: torch.roll(y, 3), 'RollBackward0', 'rolls the flattened'),
    'pad shift': (lambda y: F.pad(y, (0, 0, 0, 0, 1, -1)), 'ConstantPadNdBackward0',
                  'pads it by (1, -1)'),
    'max pool': (lambda y: F.max_pool3d(y.unsqueeze(1), (3, 1, 1), 1, (1, 0, 0)).squeeze(1),
                 'MaxPool3DWithIndicesBackward0', 'pools over it (window 3'),
    'avg pool': (lambda y: F.avg_pool1d(y.flatten(2).transpose(1, 2), 3, 1, 1)
                 .transpose(1, 2).reshape(1, 8, 6, 6), 'AvgPool2DBackward0',
                 'pools over it (window 3'),
}


@pytest.mark.parametrize('case', sorted(ALONG_CHANNELS))
def test_pass_op_moving_values_along_channels_freezes_them(case):
    op, name, how = ALONG_CHANNELS[case]
    reasons = Traced(OpNet(op), X).reasons('a')
    assert [(r.kind, r.op) for r in reasons] == [('mixing', name)]
    assert 'moves values along channel dim' in reasons[0].message and how in reasons[0].message


@pytest.mark.parametrize('op', [lambda y: torch.roll(y, 1, 2), lambda y: F.pad(y, (1, -1)),
                                lambda y: F.max_pool3d(y.unsqueeze(1), (1, 3, 3), 1, (0, 1, 1))
                                .squeeze(1)])
def test_pass_op_moving_values_along_space_keeps_channels(op):
    assert Traced(OpNet(op), X).group_of('a').prunable


class Weird(torch.autograd.Function):
    """An op razorlib has never heard of."""

    @staticmethod
    def forward(ctx, x):
        return x.flip(1) * 2

    @staticmethod
    def backward(ctx, grad):
        return grad.flip(1) * 2


def test_unknown_op_is_frozen_with_a_reason_naming_op_and_modules():
    traced = Traced(OpNet(Weird.apply), X)
    (reason, ) = traced.reasons('a')
    assert reason.kind == 'unknown-op' and reason.op == 'WeirdBackward'
    assert reason.upstream == ('a', ) and reason.downstream == ('head', )
    assert 'WeirdBackward' in str(reason) and 'after a' in str(reason)
    assert 'before head' in str(reason)
    # the head reads fixed channels now, and nothing else was corrupted
    assert traced.group_of('a').frozen


def test_unknown_op_raises_under_strict():
    with pytest.raises(TracingError, match=r'WeirdBackward: this grad_fn is not in the '
                       r'channel rule table; after a; before head'):
        Traced(OpNet(Weird.apply), X, strict=True)


def test_strict_accepts_known_mixing_ops():
    traced = Traced(OpNet(lambda y: F.pixel_shuffle(y, 2)), X, strict=True)
    assert [(r.kind, r.op) for r in traced.reasons('a')] == [('mixing', 'PixelShuffleBackward0')]
