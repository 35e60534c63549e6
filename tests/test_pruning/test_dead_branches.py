"""Ops whose results nothing uses still run in the slim model, so they still couple
channels: each pattern below sliced into a model whose forward crashed (``The size of
tensor a (2) must match the size of tensor b (8)``, ``tuple index out of range``) before
the tracer walked every op the forward created."""
import copy

import numpy as np
import pytest
import torch
import torch.nn as nn

from razorlib.pruning import L1NormPruner
from razorlib.tracing import build_groups, trace

X = torch.randn(2, 3, 8, 8)


class Gate(nn.Module):
    """SE gate: sigmoid(fc2(relu(fc1(mean(x)))))."""

    def __init__(self, channels):
        super().__init__()
        self.fc1, self.fc2 = nn.Conv2d(channels, 2, 1), nn.Conv2d(2, channels, 1)

    def forward(self, x):
        return torch.sigmoid(self.fc2(torch.relu(self.fc1(x.mean((2, 3), keepdim=True)))))


class Dead(nn.Module):
    """A live path ``a -> head`` beside a dead op built by ``dead(self, a, b)``."""

    def __init__(self, dead, b_width=8):
        super().__init__()
        self.a = nn.Conv2d(3, 8, 3, padding=1)
        self.b = nn.Conv2d(3, b_width, 3, padding=1)
        self.gate = Gate(8)
        self.head = nn.Conv2d(8, 4, 1)
        self.dead = dead

    def forward(self, x):
        a, b = self.a(x), self.b(x)
        self.dead(self, a, b)  # computed, then dropped
        return self.head(torch.relu(a))


PATTERNS = {
    'se_gate_into_dropped_map': lambda m, a, b: a * m.gate(a),
    'unused_add': lambda m, a, b: a + b,
    'unused_cat_then_add': lambda m, a, b: torch.cat([a, b], 1) + torch.cat([b, b], 1),
    'cat_of_a_map_with_itself': lambda m, a, b: torch.cat([b, b], 1) * torch.cat([a, a], 1),
    'discarded_map': lambda m, a, b: torch.relu(b) - a,
    'dead_chunk': lambda m, a, b: a.chunk(4, 1)[3],
}


def masked_and_slim(model, ratio):
    pruner = L1NormPruner(ratio=ratio)
    pruner.prepare_from_supernet(model, X)
    pruner.set_subnet(pruner.sample_subnet())
    with torch.no_grad():
        masked = model(X)
        slim = pruner.deploy_subnet(copy.deepcopy(model), pruner.export_subnet())
        return pruner, masked, slim(X)


@pytest.mark.parametrize('pattern', sorted(PATTERNS))
def test_dead_op_couples_channels_and_slim_model_runs(pattern):
    torch.manual_seed(0)
    pruner, masked, out = masked_and_slim(Dead(PATTERNS[pattern]).eval(), ratio=0.25)
    assert (masked - out).abs().max() <= 1e-5 * masked.abs().max()
    assert pruner.groups.prunable


def test_dead_add_binds_its_operands():
    groups = build_groups(trace(Dead(PATTERNS['unused_add']), X))
    group = next(g for g in groups.groups.values() if 'a' in g.layers)
    assert {'a', 'b'} <= set(group.layers) and group.prunable


def test_dead_se_gate_binds_the_gated_map_to_the_gate():
    groups = build_groups(trace(Dead(PATTERNS['se_gate_into_dropped_map']), X))
    group = next(g for g in groups.groups.values() if 'a' in g.layers)
    assert {'a', 'gate.fc2'} <= set(group.layers) and group.prunable


def test_dead_chunk_keeps_its_pieces_equal():
    """a.chunk(4)[3] dropped: a's 8 channels are 2 independent ones, each kept in all 4
    pieces, so a never shrinks below 4 channels (the slim chunk had 2 pieces before)."""
    groups = build_groups(trace(Dead(PATTERNS['dead_chunk']), X))
    group = next(g for g in groups.groups.values() if 'a' in g.layers)
    assert group.num_channels == 2 and group.width == 8
    torch.manual_seed(0)
    _, _, out = masked_and_slim(Dead(PATTERNS['dead_chunk']).eval(), ratio=0.01)
    assert out.shape == (2, 4, 8, 8)


def test_dead_code_does_not_change_the_live_groups():
    """Dead ops are walked after the live graph: the space ids and widths the outputs
    reach are the same with or without them."""
    def live(model):
        groups = build_groups(trace(model, X)).groups
        return {gid: (g.width, g.layers[:1]) for gid, g in groups.items()
                if gid in ('a', 'head', 'gate.fc1')}
    assert live(Dead(lambda m, a, b: None)) == live(Dead(PATTERNS['discarded_map']))


def test_dead_cat_then_slice_of_dead_result_leaves_model_runnable():
    """A dead op on a frozen slice still runs after pruning: the slice's input is frozen."""
    model = Dead(lambda m, a, b: torch.cat([a, b], 1)[:, :3]).eval()
    pruner, masked, out = masked_and_slim(model, ratio=0.5)
    assert np.allclose(masked.numpy(), out.numpy(), atol=1e-5)
