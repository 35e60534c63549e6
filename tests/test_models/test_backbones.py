"""Backbones: output shapes, reference parameter counts, out_indices, pruned forwards."""
import pytest
import torch
import torch.nn as nn

import razorlib
from razorlib.models import (MobileNetV2, PlainCNN, ResNet, ShuffleNetV2, channel_shuffle,
                             make_divisible)


def num_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


SMALL = {
    'resnet18': lambda **kw: ResNet(depth=18, base_channels=16, **kw),
    'resnext50': lambda **kw: ResNet(depth=50, base_channels=16, groups=4,
                                     width_per_group=8, **kw),
    'mobilenet_v2': lambda **kw: MobileNetV2(widen_factor=0.35, **kw),
    'shufflenet_v2': lambda **kw: ShuffleNetV2(widen_factor=0.5, **kw),
}


@pytest.mark.parametrize('name', sorted(SMALL))
@pytest.mark.parametrize('stem, size, feature_size', [('imagenet', 32, 1), ('cifar', 32, None)])
def test_forward_shapes(name, stem, size, feature_size):
    torch.manual_seed(0)
    x = torch.randn(2, 3, size, size)
    logits = SMALL[name](num_classes=7, stem=stem)(x)
    assert logits.shape == (2, 7)
    backbone = SMALL[name](stem=stem)
    feats = backbone(x)
    assert feats.shape[:2] == (2, backbone.num_features)
    if feature_size is not None:
        assert feats.shape[2:] == (feature_size, feature_size)


@pytest.mark.parametrize('stem, expected', [('imagenet', 1), ('cifar', 4)])
def test_resnet_stems_downsample(stem, expected):
    feats = ResNet(depth=18, base_channels=8, stem=stem)(torch.randn(2, 3, 32, 32))
    assert feats.shape == (2, 64, expected, expected)


def test_cifar_stem_handles_8x8_digits():
    for build in SMALL.values():
        assert build(num_classes=10, stem='cifar')(torch.randn(2, 3, 8, 8)).shape == (2, 10)
    assert PlainCNN(in_channels=1, num_classes=10)(torch.randn(2, 1, 8, 8)).shape == (2, 10)


@pytest.mark.parametrize('build, expected', [
    (lambda: ResNet(depth=18, num_classes=1000), 11_689_512),
    (lambda: ResNet(depth=34, num_classes=1000), 21_797_672),
    (lambda: ResNet(depth=50, num_classes=1000), 25_557_032),
    (lambda: ResNet(depth=101, num_classes=1000), 44_549_160),
    (lambda: ResNet(depth=152, num_classes=1000), 60_192_808),
    (lambda: ResNet(depth=50, groups=32, width_per_group=4, num_classes=1000), 25_028_904),
    (lambda: MobileNetV2(widen_factor=1.0, num_classes=1000), 3_504_872),
    (lambda: MobileNetV2(widen_factor=0.5, num_classes=1000), 1_968_680),
    (lambda: ShuffleNetV2(widen_factor=1.0, num_classes=1000), 2_278_604),
    (lambda: ShuffleNetV2(widen_factor=0.5, num_classes=1000), 1_366_792),
    (lambda: ShuffleNetV2(widen_factor=2.0, num_classes=1000), 7_393_996),
])
def test_reference_parameter_counts(build, expected):
    # The published (torchvision) counts, with a 1000-class linear classifier.
    assert num_params(build()) == expected


@pytest.mark.parametrize('build, indices, channels', [
    (lambda idx: ResNet(depth=50, base_channels=8, out_indices=idx), (0, 1, 2, 3),
     [32, 64, 128, 256]),
    (lambda idx: MobileNetV2(widen_factor=0.5, out_indices=idx), (2, -1), [16, 1280]),
    (lambda idx: ShuffleNetV2(widen_factor=0.5, out_indices=idx), (0, 2), [48, 192]),
    (lambda idx: PlainCNN(channels=(4, 8, 16), out_indices=idx), (1, ), [8]),
])
def test_out_indices_return_stage_features(build, indices, channels):
    backbone = build(indices)
    outs = backbone(torch.randn(2, 3, 32, 32))
    assert isinstance(outs, tuple)
    assert [o.shape[1] for o in outs] == channels
    assert backbone.num_features == channels[-1]
    sizes = [o.shape[-1] for o in outs]
    assert sizes == sorted(sizes, reverse=True)


@pytest.mark.parametrize('build, match', [
    (lambda: ResNet(depth=20), 'depth must be one of'),
    (lambda: ResNet(depth=18, groups=32), 'BasicBlock'),
    (lambda: ResNet(depth=18, stem='tiny'), 'stem must be one of'),
    (lambda: ShuffleNetV2(widen_factor=0.75), 'widen_factor must be one of'),
    (lambda: MobileNetV2(out_indices=(8, )), 'out of range'),
    (lambda: PlainCNN(num_classes=10, out_indices=(0, )), 'at most one'),
    (lambda: PlainCNN(out_indices=()), 'out_indices is empty'),
    (lambda: ResNet(depth=18, out_indices=[]), 'out_indices is empty'),
    (lambda: PlainCNN(num_classes=0), 'num_classes must be positive'),
    (lambda: MobileNetV2(num_classes=-1), 'num_classes must be positive'),
    (lambda: PlainCNN(channels=(8, 16), strides=(1, )), 'strides'),
])
def test_invalid_arguments_are_named(build, match):
    with pytest.raises(ValueError, match=match):
        build()


def test_make_divisible_rounds_to_multiples_of_eight():
    assert [make_divisible(v) for v in (32 * 0.35, 24 * 0.5, 1280 * 1.4, 3)] == [16, 16, 1792, 8]


def test_channel_shuffle_interleaves_groups_of_any_width():
    x = torch.arange(6.).view(1, 6, 1, 1)
    assert channel_shuffle(x, 2).flatten().tolist() == [0, 3, 1, 4, 2, 5]
    assert channel_shuffle(x, 3).flatten().tolist() == [0, 2, 4, 1, 3, 5]


def test_residual_only_where_shapes_match():
    mobilenet = MobileNetV2(widen_factor=0.5)
    blocks = [m for m in mobilenet.modules() if hasattr(m, 'use_residual')]
    assert sum(b.use_residual for b in blocks) == 10  # 17 blocks, 7 change shape
    resnet = ResNet(depth=18, base_channels=8)
    assert [b.downsample is not None for b in resnet.modules() if hasattr(b, 'downsample')] \
        == [False, False, True, False, True, False, True, False]


@pytest.mark.parametrize('name', sorted(SMALL))
def test_pruned_backbones_still_run(name):
    # Nothing in forward hard-codes a width: a slimmed copy must run at half the channels.
    torch.manual_seed(0)
    model = SMALL[name](num_classes=10, stem='cifar').eval()
    x = torch.randn(2, 3, 16, 16)
    slim = razorlib.prune(model, x, ratio=0.5).eval()
    assert slim(x).shape == (2, 10)
    assert num_params(slim) < 0.5 * num_params(model)
