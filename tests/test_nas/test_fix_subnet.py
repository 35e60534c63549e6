"""fix_subnet: a plain model with no mutable, same outputs, YAML round trip, ONNX, PTQ."""
import random

import onnxruntime as ort
import pytest
import torch

import razorlib
from razorlib.ir import TorchExecutor, from_torch
from razorlib.nas import (FixedSubnet, NasMutator, fix_subnet, load_fix_subnet, nas_subnet,
                          remaining_mutables)
from razorlib.quantization import quantize_torch_model
from razorlib.registry import MODELS

SHUFFLE = dict(type='ImageClassifier',
               backbone=dict(type='SearchableShuffleNetV2', arch_setting=[(16, 2, 2), (32, 2, 2)],
                             stem_channels=8, stem='cifar', last_channels=None),
               head=dict(type='LinearClsHead', num_classes=10))
MBCONV = dict(type='ImageClassifier',
              backbone=dict(type='SearchableMobileNet', arch_setting=[(16, 2, 2), (24, 3, 2)],
                            stem_channels=8, first_channels=8, last_channels=None, stem='cifar',
                            depths=[(1, 2), (2, 3)]),
              head=dict(type='LinearClsHead', num_classes=10))


def supernet_and_subnet(cfg: dict, seed: int):
    torch.manual_seed(0)
    model = MODELS.build(cfg).eval()
    mutator = NasMutator(model)
    subnet = mutator.sample(random.Random(seed))
    mutator.set(subnet)
    return model, mutator, subnet


@pytest.mark.parametrize('cfg', [SHUFFLE, MBCONV], ids=['shufflenet', 'mbconv'])
@pytest.mark.parametrize('seed', [0, 1, 2])
def test_the_fixed_model_has_no_mutable_and_computes_the_subnet(cfg, seed):
    model, mutator, subnet = supernet_and_subnet(cfg, seed)
    fixed = fix_subnet(model, subnet)
    assert remaining_mutables(fixed) == [] and remaining_mutables(model) != []
    x = torch.randn(2, 3, 16, 16)
    assert torch.allclose(model(x), fixed(x), atol=1e-5)
    assert sum(p.numel() for p in fixed.parameters()) < sum(p.numel() for p in model.parameters())


def test_a_subnet_yaml_round_trips_and_builds_the_same_network(tmp_path):
    model, mutator, subnet = supernet_and_subnet(MBCONV, 3)
    path = tmp_path / 'subnet.yaml'
    FixedSubnet(mutator.active(subnet)).dump(path)
    assert FixedSubnet.load(path).choices == mutator.active(subnet)
    x = torch.randn(1, 3, 16, 16)
    assert torch.allclose(fix_subnet(model, path)(x), model(x), atol=1e-5)
    in_place = load_fix_subnet(model, path)
    assert remaining_mutables(in_place) == []


@pytest.mark.parametrize('edit, message', [
    ({'backbone.stages.0.1': 'shuffle_9x9'}, "backbone.stages.0.1: 'shuffle_9x9' is not a choice"),
    ({'backbone.stages.7.0': 'shuffle_3x3'}, "unknown mutable 'backbone.stages.7.0'"),
])
def test_a_yaml_with_an_unknown_op_or_key_is_refused_naming_file_and_key(tmp_path, edit, message):
    model, mutator, subnet = supernet_and_subnet(SHUFFLE, 0)
    path = tmp_path / 'bad.yaml'
    FixedSubnet(dict(subnet, **edit)).dump(path)
    with pytest.raises(ValueError, match=f'{path}: {message}'):
        fix_subnet(model, path)


def test_a_yaml_with_an_unknown_value_is_refused(tmp_path):
    model, mutator, subnet = supernet_and_subnet(MBCONV, 0)
    key = next(k for k in mutator.active(subnet) if k.endswith('kernel_size'))
    path = tmp_path / 'bad.yaml'
    FixedSubnet(dict(subnet, **{key: 9})).dump(path)
    with pytest.raises(ValueError, match=f'{key}: 9 is not a choice'):
        nas_subnet(MBCONV, path)


@pytest.mark.parametrize('name, text', [
    ('dup.yaml', 'backbone.op: conv3x3\nbackbone.kernel: 5\nbackbone.kernel: 7\n'),
    ('dup.json', '{"backbone.op": "conv3x3", "backbone.kernel": 5, "backbone.kernel": 7}'),
])
def test_a_subnet_file_naming_a_key_twice_is_refused_naming_file_and_key(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ValueError, match=f"{path}: duplicate key 'backbone.kernel'"):
        FixedSubnet.load(path)


def test_nas_subnet_reinitialises_the_fixed_network():
    model, mutator, subnet = supernet_and_subnet(SHUFFLE, 0)
    torch.manual_seed(1)
    fresh = nas_subnet(SHUFFLE, subnet)
    assert remaining_mutables(fresh) == []
    kept = fix_subnet(model, subnet)
    assert not torch.equal(fresh.head.fc.weight, kept.head.fc.weight)


@pytest.mark.parametrize('cfg', [SHUFFLE, pytest.param(MBCONV, marks=pytest.mark.slow)],
                         ids=['shufflenet', 'mbconv'])
def test_the_fixed_model_exports_to_onnx_and_quantizes(tmp_path, cfg):
    model, mutator, subnet = supernet_and_subnet(cfg, 4)
    fixed = fix_subnet(model, subnet).eval()
    x = torch.randn(2, 3, 16, 16)
    path = tmp_path / 'subnet.onnx'
    torch.onnx.export(fixed, (x, ), str(path), dynamo=False)
    session = ort.InferenceSession(str(path))
    (out, ) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    assert torch.allclose(torch.from_numpy(out), fixed(x), atol=1e-4)
    graph = from_torch(fixed, x)
    assert torch.allclose(TorchExecutor(graph)(x)[0], fixed(x), atol=1e-4)
    calib = [torch.randn(2, 3, 16, 16) for _ in range(3)]
    quantized = quantize_torch_model(fixed, calib, x, progress=False)
    assert any(op.type == 'Conv' for op in quantized.operations.values())


def test_the_fixed_model_prunes_like_any_model():
    model, mutator, subnet = supernet_and_subnet(SHUFFLE, 5)
    fixed = fix_subnet(model, subnet).eval()
    x = torch.randn(1, 3, 16, 16)
    slim = razorlib.prune(fixed, x, ratio=0.5)
    assert slim(x).shape == (1, 10)
    assert sum(p.numel() for p in slim.parameters()) < sum(p.numel() for p in fixed.parameters())
