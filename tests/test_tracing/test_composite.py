"""Layers whose forward is plain ops (RMSNorm) are traced as one op: their channels follow
their input's, and a call that reads another tensor is walked op by op."""
import copy

import pytest
import torch
import torch.nn as nn

from helpers import Traced
from razorlib.layers import RMSNormKind, kind_of
from razorlib.pruning import L1NormPruner


class Residual(nn.Module):
    """A pre-norm residual block: the stream's channels reach the norm, the MLP and the add."""

    def __init__(self, norm: nn.Module):
        super().__init__()
        self.embed = nn.Linear(6, 8)
        self.norm = norm
        self.fc1, self.fc2 = nn.Linear(8, 16), nn.Linear(16, 8)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        x = self.embed(x)
        x = x + self.fc2(torch.relu(self.fc1(self.norm(x))))
        return self.head(x)


class BiasedRMSNorm(nn.RMSNorm):
    """Reads a second tensor: its ops are not its own, so they are walked one by one."""

    def forward(self, x, shift=None):
        return super().forward(x + shift if shift is not None else x)


class Shifted(Residual):
    def forward(self, x):
        x = self.embed(x)
        return self.head(self.norm(x, self.fc2(torch.relu(self.fc1(x)))))


def test_an_rmsnorm_call_is_one_op_whose_channels_follow_its_input():
    traced = Traced(Residual(nn.RMSNorm(8)), torch.randn(2, 5, 6))
    group = traced.group_of('embed')
    assert group.prunable and group.num_channels == 8
    assert 'norm' in group.norms
    assert traced.graph.op_counts.get('MeanBackward1') == 1  # walked over, not followed


def test_a_call_that_reads_another_tensor_is_walked_op_by_op_and_freezes():
    traced = Traced(Shifted(BiasedRMSNorm(8)), torch.randn(2, 5, 6))
    group = traced.group_of('embed')
    assert not group.prunable
    assert any('MeanBackward1: reduces over channel dim' in str(r) for r in group.frozen_reasons)


def test_masked_rmsnorm_recomputes_its_statistic_over_the_kept_channels():
    torch.manual_seed(0)
    model = Residual(nn.RMSNorm(8, eps=1e-6)).eval()
    x = torch.randn(2, 5, 6)
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, x)
    pruner.set_subnet(pruner.sample_subnet())
    with torch.no_grad():
        masked = model(x)
    slim = pruner.deploy_subnet(copy.deepcopy(model), pruner.export_subnet())
    assert slim.norm.normalized_shape == (4, ) and slim.norm.weight.shape == (4, )
    with torch.no_grad():
        torch.testing.assert_close(slim(x), masked, rtol=1e-5, atol=1e-6)


def test_transformers_rmsnorm_classes_are_claimed_by_name():
    transformers = pytest.importorskip('transformers')
    llama = transformers.models.llama.modeling_llama
    qwen3 = transformers.models.qwen3.modeling_qwen3
    assert isinstance(kind_of(llama.LlamaRMSNorm(8)), RMSNormKind)
    assert isinstance(kind_of(qwen3.Qwen3RMSNorm(8)), RMSNormKind)
    assert isinstance(kind_of(nn.RMSNorm(8)), RMSNormKind)

    class RMSNorm(nn.Module):  # a class of the user's own is not claimed by its name
        pass

    assert kind_of(RMSNorm()) is None


def test_an_rmsnorm_whose_epsilon_is_unknown_is_walked_op_by_op():
    class OddRMSNorm(nn.Module):  # eps under another name: the masked output can't be exact
        def __init__(self, width):
            super().__init__()
            self.weight, self.epsilon = nn.Parameter(torch.ones(width)), 1e-5

        def forward(self, x):
            return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.epsilon)

    class OddKind(RMSNormKind):
        module_types = (OddRMSNorm, )

    traced = Traced(Residual(OddRMSNorm(8)), torch.randn(2, 5, 6), layer_kinds=[OddKind()])
    group = traced.group_of('embed')
    assert not group.prunable
    assert any('MeanBackward1: reduces over channel dim' in str(r) for r in group.frozen_reasons)
