"""Sanity checks for the model zoo in ``tests/zoo.py``."""

import pytest
import torch
import torch.nn as nn

import zoo
from zoo import ZOO, ZooEntry, flatten_outputs, run_model

REQUIRED = [
    'resnet_basic', 'resnet_bottleneck', 'mobilenet_v2', 'se_net', 'densenet', 'inception',
    'shufflenet_v2', 'resnext', 'fpn_shared_head', 'unet', 'vgg', 'vit', 'convnext',
    'conv1d_gn', 'frozen_stem', 'mixed_consumers', 'dead_branch', 'conv3d',
]
NAMES = sorted(ZOO)


def _forward(entry: ZooEntry, seed: int = 0):
    torch.manual_seed(seed)
    model = entry.build().eval()
    with torch.no_grad():
        out = run_model(model, entry.example_inputs())
    return model, flatten_outputs(out)


def test_required_entries_present():
    assert set(REQUIRED) <= set(ZOO)
    for name, entry in ZOO.items():
        assert isinstance(entry, ZooEntry)
        assert entry.name == name
        assert entry.notes


@pytest.mark.parametrize('name', NAMES)
def test_builds_and_runs(name):
    model, outs = _forward(ZOO[name])
    assert isinstance(model, nn.Module)
    assert outs
    for t in outs:
        assert torch.isfinite(t).all()
        assert t.abs().max() > 0


@pytest.mark.parametrize('name', NAMES)
def test_deterministic(name):
    entry = ZOO[name]
    m1, out1 = _forward(entry, seed=0)
    m2, out2 = _forward(entry, seed=0)
    assert m1 is not m2  # fresh model per build
    sd1, sd2 = m1.state_dict(), m2.state_dict()
    assert sd1.keys() == sd2.keys()
    for k in sd1:
        assert torch.equal(sd1[k], sd2[k]), k
    assert len(out1) == len(out2)
    for a, b in zip(out1, out2):
        assert torch.equal(a, b)
    # example inputs are fixed and do not depend on the global RNG
    torch.manual_seed(123)
    a = flatten_outputs(entry.example_inputs())
    b = flatten_outputs(entry.example_inputs())
    assert all(torch.equal(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize('name', NAMES)
def test_norms_randomized(name):
    torch.manual_seed(0)
    model = ZOO[name].build()
    for mod_name, m in model.named_modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            assert not torch.equal(m.running_var, torch.ones_like(m.running_var)), mod_name
            assert not torch.equal(m.running_mean, torch.zeros_like(m.running_mean)), mod_name
        if isinstance(m, (nn.modules.batchnorm._BatchNorm, nn.LayerNorm, nn.GroupNorm)):
            assert not torch.equal(m.weight, torch.ones_like(m.weight)), mod_name
            assert not torch.equal(m.bias, torch.zeros_like(m.bias)), mod_name
        gamma = getattr(m, 'gamma', None)
        if isinstance(gamma, nn.Parameter):
            assert not torch.equal(gamma, torch.ones_like(gamma)), mod_name


@pytest.mark.parametrize('name', NAMES)
def test_train_mode_backward(name):
    """Pruning criteria and the autograd tracer need a train-mode forward with gradients."""
    torch.manual_seed(0)
    model = ZOO[name].build().train()
    loss = sum(t.sum() for t in flatten_outputs(run_model(model, ZOO[name].example_inputs())))
    loss.backward()
    assert any(p.grad is not None for p in model.parameters())


def test_frozen_stem_flags():
    torch.manual_seed(0)
    model = ZOO['frozen_stem'].build()
    frozen = {n for n, p in model.named_parameters() if not p.requires_grad}
    assert frozen == {'conv1.weight', 'bn1.weight', 'bn1.bias'}
    assert all(p.requires_grad for n, p in model.named_parameters() if n not in frozen)


def test_fpn_output_structure():
    torch.manual_seed(0)
    model = ZOO['fpn_shared_head'].build().eval()
    with torch.no_grad():
        out = run_model(model, ZOO['fpn_shared_head'].example_inputs())
    assert set(out) == {'cls', 'reg'}
    assert [t.shape[-1] for t in out['cls']] == [16, 8, 4]
    assert [t.shape[-1] for t in out['reg']] == [16, 8, 4]


def test_unet_output_shape():
    _, outs = _forward(ZOO['unet'])
    assert outs[0].shape == (1, 2, 32, 32)


def test_run_model_input_kinds():
    class Two(nn.Module):
        def forward(self, a, b=None):
            return a if b is None else a + b

    a, b = torch.ones(2), torch.full((2,), 2.0)
    assert torch.equal(run_model(Two(), a), a)
    assert torch.equal(run_model(Two(), (a, b)), a + b)
    assert torch.equal(run_model(Two(), {'a': a, 'b': b}), a + b)


def test_randomize_norms_keeps_requires_grad():
    bn = nn.BatchNorm2d(4)
    bn.weight.requires_grad_(False)
    zoo.randomize_norms(bn)
    assert not bn.weight.requires_grad and bn.bias.requires_grad
