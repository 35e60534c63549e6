"""Mutables: one active candidate, the DARTS mixture, values, dynamic blocks, errors."""
import pytest
import torch
import torch.nn as nn

from razorlib.nas import (DiffMutableOP, DynamicMBConv, DynamicStage, MBConvBlock,
                          OneShotMutableOP, OneShotMutableValue, ShuffleBlock)
from razorlib.registry import MUTABLES


def test_one_shot_op_runs_only_the_current_candidate():
    calls = []
    ops = {name: nn.Identity() for name in ('a', 'b')}
    for name, op in ops.items():
        op.register_forward_hook(lambda m, i, o, name=name: calls.append(name))
    mutable = OneShotMutableOP(ops)
    mutable.current_choice = 'b'
    mutable(torch.ones(1))
    assert calls == ['b'] and mutable.chosen() is ops['b']


def test_candidates_build_from_configs_and_mutables_from_the_registry():
    op = MUTABLES.build(dict(type='OneShotMutableOP', candidates=dict(
        k3=dict(type='ShuffleBlock', in_channels=8, out_channels=8, stride=1, kernel_size=3),
        k5=dict(type='ShuffleBlock', in_channels=8, out_channels=8, stride=1, kernel_size=5))))
    assert isinstance(op.candidates['k5'], ShuffleBlock)
    assert op.candidates['k5'].main[1].conv.kernel_size == (5, 5)


def test_a_bad_choice_is_named_with_the_valid_ones():
    op = OneShotMutableOP(dict(conv=nn.Identity(), skip=nn.Identity()))
    with pytest.raises(ValueError, match=r"'pool' is not a choice .* \('conv', 'skip'\)"):
        op.current_choice = 'pool'
    with pytest.raises(ValueError, match='distinct'):
        OneShotMutableValue([3, 3])
    with pytest.raises(TypeError, match='takes numbers'):
        OneShotMutableValue(['3'])


def test_diff_op_is_the_softmax_weighted_sum_and_its_gradient_reaches_arch_param():
    op = DiffMutableOP(dict(one=nn.Identity(), neg=nn.Sequential(nn.Identity())))
    op.candidates['neg'].append(nn.Tanh())
    with torch.no_grad():
        op.arch_param.copy_(torch.tensor([1.0, -1.0]))
    x = torch.randn(4)
    weights = torch.softmax(torch.tensor([1.0, -1.0]), 0)
    assert torch.allclose(op(x), weights[0] * x + weights[1] * torch.tanh(x))
    op(x).sum().backward()
    assert op.arch_param.grad is not None and op.argmax() == 'one'


@pytest.mark.parametrize('kernel, ratio', [(3, 3), (5, 6), (7, 3)])
def test_dynamic_mbconv_equals_its_static_block(kernel, ratio):
    torch.manual_seed(0)
    block = DynamicMBConv(8, 8, 1, kernel_sizes=(3, 5, 7), expand_ratios=(3, 6))
    block.kernel_size.current_choice, block.expand_ratio.current_choice = kernel, ratio
    block.train()
    x = torch.randn(4, 8, 6, 6)
    block(x)  # updates the running statistics of the slices in use
    static = block.to_static().eval()
    assert isinstance(static, MBConvBlock)
    assert static.depthwise.conv.kernel_size == (kernel, kernel)
    assert static.expand.conv.out_channels == 8 * ratio
    assert torch.allclose(block.eval()(x), static(x), atol=1e-5)
    untouched = block.expand.bn.running_mean[8 * ratio:]
    assert ratio == 6 or torch.equal(untouched, torch.zeros_like(untouched))


def test_dynamic_stage_runs_its_first_depth_blocks():
    stage = DynamicStage([nn.Linear(2, 2) for _ in range(3)], depths=(1, 2, 3))
    x = torch.randn(1, 2)
    stage.depth.current_choice = 2
    assert torch.allclose(stage(x), stage.blocks[1](stage.blocks[0](x)))
    with pytest.raises(ValueError, match=r'depths must be in \[1, 3\]'):
        DynamicStage([nn.Identity()] * 3, depths=(0, 3))
