"""Mamba's inner width (``intermediate_size``, d_inner) prunes: ``in_proj``'s two halves
(x and the gate), the depthwise ``conv1d``, ``x_proj``'s inputs, ``dt_proj``'s outputs,
the rows of ``A_log`` and ``D``, and ``out_proj``'s inputs; the slim model computes what
the masked one does, and its config describes it.

Before, Mamba pruned nothing.  Its mixer runs ``conv1d`` as ``F.conv1d`` on
``conv1d.weight.squeeze(1).unsqueeze(1)`` (the tracer found no layer behind that weight:
a mixing convolution) and ``dt_proj`` as ``dt_proj.weight @ x`` (both layers then frozen
as layers whose weight runs outside their forward, the output axis too, which needs no
mask), and a trace on ``meta`` keeps the cache, whose ``copy_`` of the conv state
(``CopyBackwards``) was not in the rule table.
"""
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from masked_vs_slim import deploy_checked, main_output, relative_error

import razorlib
from razorlib.integrations.transformers import (hidden_size_keys, load_pruned, prune,
                                                save_pruned)
from razorlib.pruning import L1NormPruner
from razorlib.tracing.groups import build_groups
from razorlib.tracing.tracer import trace

UNCALLED = ("[mixing] {0}: {0}'s weight is used outside its forward (e.g. F.linear on it), "
            'where its channel masks cannot apply; after {0}')


class ScanLike(nn.Module):
    """Mamba's mixer without transformers: ``in_proj`` cut into x and a gate, a depthwise
    conv run as ``F.conv1d`` on its weight viewed and viewed back, a Linear run as
    ``weight @ x`` with its bias added by hand, a per-channel parameter read directly."""

    def __init__(self):
        super().__init__()
        self.in_proj = nn.Linear(8, 32)
        self.conv = nn.Conv1d(16, 16, 3, groups=16, padding=2)
        self.x_proj = nn.Linear(16, 4)
        self.dt_proj = nn.Linear(4, 16)
        self.D = nn.Parameter(torch.randn(16))
        self.out_proj = nn.Linear(16, 8)

    def forward(self, h):
        x, gate = self.in_proj(h).transpose(1, 2).chunk(2, dim=1)
        weight = self.conv.weight.squeeze(1).unsqueeze(1)
        x = F.conv1d(x, weight, self.conv.bias, padding=2, groups=x.shape[1])
        x = F.silu(x[..., :h.shape[1]])
        dt = self.dt_proj.weight @ self.x_proj(x.transpose(1, 2)).transpose(1, 2)
        y = x * F.softplus(dt + self.dt_proj.bias[:, None]) + x * self.D[:, None]
        return self.out_proj((y * F.silu(gate)).transpose(1, 2))


def test_layers_run_on_their_weights_prune_their_outputs_and_the_masked_model_follows():
    torch.manual_seed(0)
    model, x = ScanLike().eval(), torch.randn(2, 5, 8)
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, x)
    groups = pruner.groups.groups
    assert list(pruner.groups.prunable) == ['in_proj']
    assert groups['in_proj'].layers == ['in_proj', 'conv', 'dt_proj']
    # dt_proj's inputs (x_proj's outputs) would need dt_proj's input mask: they freeze
    assert not groups['x_proj'].prunable
    assert [str(r) for r in groups['x_proj'].frozen_reasons] == [UNCALLED.format('dt_proj')]
    torch.manual_seed(0)
    pruner.set_subnet(pruner.sample_subnet())
    masked, slim = deploy_checked(pruner, model, x)
    assert relative_error(masked, main_output(model, torch.randn(2, 5, 8))) > 0.01
    assert (slim.in_proj.out_features, slim.conv.groups, slim.conv.out_channels) == (16, 8, 8)
    assert (slim.x_proj.in_features, slim.dt_proj.in_features) == (8, 4)
    assert (slim.dt_proj.out_features, slim.D.shape, slim.out_proj.in_features) == \
        (8, (8, ), 8)


class CacheWrite(nn.Module):
    """A state written in place (``state.copy_(x)``, Mamba's cache) beside the output."""

    def __init__(self):
        super().__init__()
        self.a, self.head = nn.Conv2d(3, 8, 1), nn.Linear(8, 2)

    def forward(self, x):
        y = self.a(x)
        torch.zeros(y.shape).copy_(y.relu())
        return self.head(y.mean((2, 3)))


def test_a_copy_into_a_state_carries_the_channels_it_copies():
    x = torch.randn(1, 8, requires_grad=True)
    assert torch.zeros(1, 8).copy_(x).grad_fn.name() == 'torch::autograd::CopyBackwards'
    for meta in (True, False):
        graph = trace(CacheWrite().eval(), torch.randn(2, 3, 6, 6), meta=meta)
        assert graph.op_counts['torch::autograd::CopyBackwards'] == 1
        assert list(build_groups(graph).prunable) == ['a']


def _mamba():
    transformers = pytest.importorskip('transformers')
    torch.manual_seed(0)
    model = transformers.MambaForCausalLM(transformers.MambaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, state_size=8,
        num_hidden_layers=2, conv_kernel=4, time_step_rank=4)).eval()
    return model, {'input_ids': torch.randint(0, 64, (2, 8),
                                              generator=torch.Generator().manual_seed(0))}


def _widths(mixer):
    return dict(in_proj=mixer.in_proj.out_features,
                conv1d=(mixer.conv1d.in_channels, mixer.conv1d.out_channels,
                        mixer.conv1d.groups),
                x_proj=(mixer.x_proj.in_features, mixer.x_proj.out_features),
                dt_proj=(mixer.dt_proj.in_features, mixer.dt_proj.out_features),
                A_log=tuple(mixer.A_log.shape), D=tuple(mixer.D.shape),
                out_proj=(mixer.out_proj.in_features, mixer.out_proj.out_features))


HALF = dict(in_proj=64, conv1d=(32, 32, 32), x_proj=(32, 20), dt_proj=(4, 32), A_log=(32, 8),
            D=(32, ), out_proj=(32, 32))


def test_one_call_prune_halves_the_inner_width_of_every_mixer():
    model, inputs = _mamba()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        slim = razorlib.prune(model, inputs, ratio=0.5)  # traced on meta, the cache on
    assert [str(w.message) for w in caught if 'razorlib' in str(w.message)] == []
    assert [_widths(layer.mixer) for layer in slim.backbone.layers] == [HALF, HALF]
    assert slim.config.intermediate_size == 32 and model.config.intermediate_size == 64
    assert slim.backbone.embeddings.weight.shape == (64, 32)
    assert main_output(slim, inputs).shape == (2, 8, 64)


def test_masked_mamba_computes_and_counts_what_the_slim_one_does():
    model, inputs = _mamba()
    dense = main_output(model, inputs)
    pruner = L1NormPruner(ratio=0.5, except_start_keys=hidden_size_keys(model))
    pruner.prepare_from_supernet(model, inputs)
    assert list(pruner.groups.prunable) == [f'backbone.layers.{i}.mixer.in_proj'
                                            for i in range(2)]
    group = pruner.groups.prunable['backbone.layers.1.mixer.in_proj']
    assert (group.num_channels, group.width) == (64, 128)
    assert sorted(group.params) == ['backbone.layers.1.mixer.A_log', 'backbone.layers.1.mixer.D']
    torch.manual_seed(0)
    pruner.set_subnet(pruner.sample_subnet())
    masked, slim = deploy_checked(pruner, model, inputs)
    assert relative_error(masked, dense) > 0.01
    for layer in slim.backbone.layers:  # every d_inner tensor kept the same channels
        mixer, width = layer.mixer, layer.mixer.in_proj.out_features // 2
        assert width < 64 and _widths(mixer) == dict(
            in_proj=2 * width, conv1d=(width, width, width), x_proj=(width, 20),
            dt_proj=(4, width), A_log=(width, 8), D=(width, ), out_proj=(width, 32))


def test_slim_mamba_reloads_from_its_config_and_from_save_pruned(tmp_path):
    model, inputs = _mamba()
    slim = prune(model, inputs, ratio=0.5)
    expected = main_output(slim, inputs)
    slim.save_pretrained(tmp_path / 'pretrained')
    reloaded = type(slim).from_pretrained(tmp_path / 'pretrained').eval()
    assert _widths(reloaded.backbone.layers[0].mixer) == HALF
    assert relative_error(main_output(reloaded, inputs), expected) <= 1e-6
    save_pruned(slim, tmp_path / 'pruned')
    assert relative_error(main_output(load_pruned(tmp_path / 'pruned'), inputs), expected) <= 1e-6
    # generation runs the cache, which the rewritten config sizes
    tokens = slim.generate(inputs['input_ids'], max_new_tokens=2, do_sample=False)
    assert torch.equal(tokens, reloaded.generate(inputs['input_ids'], max_new_tokens=2,
                                                 do_sample=False))
