"""A zoo of small plain-PyTorch models for the pruning tests.

Each entry of :data:`ZOO` is a :class:`ZooEntry` whose ``build`` returns a
freshly initialised model and whose ``example_inputs`` returns the input(s) to
run it on. Models are deliberately tiny (a forward takes a few milliseconds on
CPU) and cover the structures a structured pruner has to understand: residual
adds, concatenation, depthwise/grouped convs, channel shuffle, shared heads,
attention head reshapes, layer scale, permuted LayerNorms, dead branches, ...

Rules the models follow:

* nn.Module only; nothing from razorlib is imported here.
* Channel counts are never hard-coded in ``forward`` (``flatten(1)``,
  ``x.size()`` and ``-1`` are used instead), except where the architecture
  itself fixes them (the ViT attention head reshape). Those places are exactly
  what the pruner must detect and freeze.
* ``build`` runs :func:`randomize_norms`, so BatchNorm running statistics and
  all norm affine parameters are random and masked-vs-sliced comparisons are
  meaningful. Everything is drawn from the global RNG, so two builds after the
  same ``torch.manual_seed`` are identical.
* ``example_inputs`` uses its own fixed generator and does not touch the
  global RNG: every call returns the same values.
"""
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ['ZooEntry', 'ZOO', 'randomize_norms', 'run_model', 'flatten_outputs']


@dataclass(frozen=True)
class ZooEntry:
    name: str
    build: Callable[[], nn.Module]
    example_inputs: Callable[[], Any]
    notes: str


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------
_BATCH_NORMS = (nn.modules.batchnorm._BatchNorm,)
_AFFINE_NORMS = (nn.LayerNorm, nn.GroupNorm)


@torch.no_grad()
def randomize_norms(model: nn.Module) -> nn.Module:
    """Give every norm layer (and layer-scale ``gamma``) non-trivial values.

    BatchNorm: running_mean, weight, bias ~ N(0, 0.5); running_var ~ U(0.5, 1.5).
    LayerNorm / GroupNorm: weight, bias ~ N(0, 0.5).
    A module attribute ``gamma`` that is an nn.Parameter (layer scale) ~ U(0.5, 1.5).
    ``requires_grad`` flags are left untouched.
    """
    for m in model.modules():
        if isinstance(m, _BATCH_NORMS):
            if m.running_mean is not None:
                m.running_mean.normal_(0, 0.5)
                m.running_var.uniform_(0.5, 1.5)
            if m.affine:
                m.weight.normal_(0, 0.5)
                m.bias.normal_(0, 0.5)
        elif isinstance(m, _AFFINE_NORMS):
            if m.weight is not None:
                m.weight.normal_(0, 0.5)
            if m.bias is not None:
                m.bias.normal_(0, 0.5)
        gamma = getattr(m, 'gamma', None)
        if isinstance(gamma, nn.Parameter):
            gamma.uniform_(0.5, 1.5)
    return model


def run_model(model: nn.Module, inputs: Any) -> Any:
    """Call ``model`` on example inputs: a tensor, a tuple (positional) or a dict (kwargs)."""
    if isinstance(inputs, dict):
        return model(**inputs)
    if isinstance(inputs, (tuple, list)):
        return model(*inputs)
    return model(inputs)


def flatten_outputs(out: Any) -> List[torch.Tensor]:
    """All tensors in a (nested) output, in a deterministic order (dicts by key)."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        return [t for k in sorted(out) for t in flatten_outputs(out[k])]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in flatten_outputs(o)]
    raise TypeError(f'unexpected output type {type(out).__name__}')


def _image(*shape: int) -> Callable[[], torch.Tensor]:
    """Example-input factory: a fixed random tensor, independent of the global RNG."""
    def make() -> torch.Tensor:
        return torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    return make


def conv_bn_relu(cin: int, cout: int, k: int = 3, stride: int = 1, groups: int = 1,
                 act: type = nn.ReLU) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout), act(inplace=True))


def conv_bn(cin: int, cout: int, k: int = 3, stride: int = 1, groups: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout))


# ---------------------------------------------------------------------------
# 1. ResNet (BasicBlock)
# ---------------------------------------------------------------------------
class BasicBlock(nn.Module):
    """conv3x3-BN-ReLU-conv3x3-BN + shortcut (identity, or 1x1 conv+BN at stride/width change)."""

    def __init__(self, cin: int, cout: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = conv_bn(cin, cout, 1, stride)

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNetBasic(nn.Module):
    """Residual adds tie block outputs in a stage; a 1x1 downsample shortcut starts a new group."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = nn.Sequential(BasicBlock(16, 16), BasicBlock(16, 16))
        self.layer2 = nn.Sequential(BasicBlock(16, 32, stride=2), BasicBlock(32, 32))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(32, num_classes)

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer2(self.layer1(x))
        return self.fc(self.avgpool(x).flatten(1))


# ---------------------------------------------------------------------------
# 2. ResNet (Bottleneck)
# ---------------------------------------------------------------------------
class Bottleneck(nn.Module):
    """1x1 reduce - 3x3 (stride, optional groups) - 1x1 expand (x4) + shortcut."""

    expansion = 4

    def __init__(self, cin: int, planes: int, stride: int = 1, groups: int = 1,
                 width: Optional[int] = None):
        super().__init__()
        width = width or planes
        cout = planes * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, groups=groups, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = conv_bn(cin, cout, 1, stride)

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNetBottleneck(nn.Module):
    """Bottleneck internals (reduce/3x3 widths) are free; the expanded outputs are residual-tied."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.stem = conv_bn_relu(3, 16)
        self.layer1 = nn.Sequential(Bottleneck(16, 8), Bottleneck(32, 8))
        self.layer2 = nn.Sequential(Bottleneck(32, 16, stride=2), Bottleneck(64, 16))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(64, num_classes)

    def forward(self, x):
        x = self.layer2(self.layer1(self.stem(x)))
        return self.fc(self.avgpool(x).flatten(1))


# ---------------------------------------------------------------------------
# 3. MobileNetV2
# ---------------------------------------------------------------------------
class InvertedResidual(nn.Module):
    """[1x1 expand] - 3x3 depthwise - 1x1 linear project; residual iff stride 1 and cin == cout."""

    def __init__(self, cin: int, cout: int, stride: int, expand_ratio: int):
        super().__init__()
        hidden = cin * expand_ratio
        self.use_res = stride == 1 and cin == cout
        layers = []
        if expand_ratio != 1:
            layers.append(conv_bn_relu(cin, hidden, 1, act=nn.ReLU6))
        layers += [
            conv_bn_relu(hidden, hidden, 3, stride, groups=hidden, act=nn.ReLU6),
            nn.Conv2d(hidden, cout, 1, bias=False),
            nn.BatchNorm2d(cout),
        ]
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        out = self.conv(x)
        return x + out if self.use_res else out


class MobileNetV2(nn.Module):
    """Depthwise convs tie their in/out channels; expand-ratio-1 block has no expand conv."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            conv_bn_relu(3, 16, 3, 2, act=nn.ReLU6),
            InvertedResidual(16, 8, 1, 1),
            InvertedResidual(8, 16, 2, 6),
            InvertedResidual(16, 16, 1, 6),
            InvertedResidual(16, 24, 2, 6),
            InvertedResidual(24, 24, 1, 6),
            conv_bn_relu(24, 64, 1, act=nn.ReLU6),
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(64, num_classes))

    def forward(self, x):
        return self.classifier(self.pool(self.features(x)).flatten(1))


# ---------------------------------------------------------------------------
# 4. Squeeze-and-Excitation
# ---------------------------------------------------------------------------
class SEConv(nn.Module):
    """SE gate with 1x1 convs: pool -> conv reduce -> ReLU -> conv expand -> sigmoid -> x * gate."""

    def __init__(self, channels: int, reduction: int = 4):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.reduce = nn.Conv2d(channels, channels // reduction, 1)
        self.relu = nn.ReLU(inplace=True)
        self.expand = nn.Conv2d(channels // reduction, channels, 1)

    def forward(self, x):
        gate = torch.sigmoid(self.expand(self.relu(self.reduce(self.pool(x)))))
        return x * gate


class SELinear(nn.Module):
    """SE gate with Linears: pool -> flatten -> fc1 -> ReLU -> fc2 -> sigmoid -> view -> x * g."""

    def __init__(self, channels: int, reduction: int = 4):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Linear(channels, channels // reduction)
        self.relu = nn.ReLU(inplace=True)
        self.fc2 = nn.Linear(channels // reduction, channels)

    def forward(self, x):
        b, c = x.shape[:2]
        gate = torch.sigmoid(self.fc2(self.relu(self.fc1(self.pool(x).flatten(1)))))
        return x * gate.view(b, c, 1, 1)


class SEBlock(nn.Module):
    """conv-BN-ReLU-conv-BN -> SE gate -> + shortcut -> ReLU."""

    def __init__(self, cin: int, cout: int, stride: int, se: type):
        super().__init__()
        self.body = nn.Sequential(conv_bn_relu(cin, cout, 3, stride), conv_bn(cout, cout))
        self.se = se(cout)
        self.shortcut = conv_bn(cin, cout, 1, stride) if (stride != 1 or cin != cout) else None
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        identity = x if self.shortcut is None else self.shortcut(x)
        return self.relu(self.se(self.body(x)) + identity)


class SENet(nn.Module):
    """Multiplicative gate (x * sigmoid(...)) ties the SE expand output to the gated tensor."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.stem = conv_bn_relu(3, 16)
        self.block1 = SEBlock(16, 16, 1, SEConv)
        self.block2 = SEBlock(16, 32, 2, SELinear)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(32, num_classes)

    def forward(self, x):
        x = self.block2(self.block1(self.stem(x)))
        return self.fc(self.pool(x).flatten(1))


# ---------------------------------------------------------------------------
# 5. DenseNet
# ---------------------------------------------------------------------------
class DenseLayer(nn.Module):
    """BN-ReLU-conv1x1-BN-ReLU-conv3x3, output concatenated onto the input."""

    def __init__(self, cin: int, growth: int, bn_size: int = 4):
        super().__init__()
        self.norm1 = nn.BatchNorm2d(cin)
        self.conv1 = nn.Conv2d(cin, bn_size * growth, 1, bias=False)
        self.norm2 = nn.BatchNorm2d(bn_size * growth)
        self.conv2 = nn.Conv2d(bn_size * growth, growth, 3, 1, 1, bias=False)

    def forward(self, x):
        new = self.conv1(F.relu(self.norm1(x)))
        new = self.conv2(F.relu(self.norm2(new)))
        return torch.cat([x, new], 1)


class Transition(nn.Module):
    """BN-ReLU-conv1x1-avgpool between dense blocks."""

    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.norm = nn.BatchNorm2d(cin)
        self.conv = nn.Conv2d(cin, cout, 1, bias=False)
        self.pool = nn.AvgPool2d(2)

    def forward(self, x):
        return self.pool(self.conv(F.relu(self.norm(x))))


class DenseNet(nn.Module):
    """Concatenation: each consumer sees slices produced by several earlier layers."""

    def __init__(self, num_classes: int = 10, growth: int = 8, layers: int = 3):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
        c = 16
        block1 = []
        for _ in range(layers):
            block1.append(DenseLayer(c, growth))
            c += growth
        self.block1 = nn.Sequential(*block1)
        self.trans = Transition(c, c // 2)
        c //= 2
        block2 = []
        for _ in range(layers):
            block2.append(DenseLayer(c, growth))
            c += growth
        self.block2 = nn.Sequential(*block2)
        self.norm = nn.BatchNorm2d(c)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(c, num_classes)

    def forward(self, x):
        x = self.block2(self.trans(self.block1(self.stem(x))))
        return self.fc(self.pool(F.relu(self.norm(x))).flatten(1))


# ---------------------------------------------------------------------------
# 6. Inception
# ---------------------------------------------------------------------------
class InceptionBlock(nn.Module):
    """Four branches (1x1; 1x1->3x3; 1x1->5x5 or 1x1->3x3->3x3; maxpool->1x1) concatenated."""

    def __init__(self, cin: int, c1: int, c3r: int, c3: int, c5r: int, c5: int, cp: int,
                 double_3x3: bool = False):
        super().__init__()
        self.branch1 = conv_bn_relu(cin, c1, 1)
        self.branch2 = nn.Sequential(conv_bn_relu(cin, c3r, 1), conv_bn_relu(c3r, c3, 3))
        if double_3x3:
            self.branch3 = nn.Sequential(conv_bn_relu(cin, c5r, 1), conv_bn_relu(c5r, c5, 3),
                                         conv_bn_relu(c5, c5, 3))
        else:
            self.branch3 = nn.Sequential(conv_bn_relu(cin, c5r, 1), conv_bn_relu(c5r, c5, 5))
        self.branch4 = nn.Sequential(nn.MaxPool2d(3, 1, 1), conv_bn_relu(cin, cp, 1))

    def forward(self, x):
        return torch.cat([self.branch1(x), self.branch2(x), self.branch3(x), self.branch4(x)], 1)


class Inception(nn.Module):
    """Fan-out to 4 branches and concat; the next block's convs consume the concatenated slices."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.stem = conv_bn_relu(3, 16)
        self.block1 = InceptionBlock(16, 8, 8, 12, 4, 6, 4)  # -> 30
        self.pool = nn.MaxPool2d(2)
        self.block2 = InceptionBlock(30, 12, 8, 16, 4, 8, 8, double_3x3=True)  # -> 44
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(44, num_classes)

    def forward(self, x):
        x = self.block2(self.pool(self.block1(self.stem(x))))
        return self.fc(self.gap(x).flatten(1))


# ---------------------------------------------------------------------------
# 7. ShuffleNetV2
# ---------------------------------------------------------------------------
def channel_shuffle(x: torch.Tensor, groups: int = 2) -> torch.Tensor:
    b, c, h, w = x.size()
    return x.view(b, groups, c // groups, h, w).transpose(1, 2).contiguous().view(b, c, h, w)


class ShuffleUnit(nn.Module):
    """Stride 1: chunk -> branch on x2 -> cat -> shuffle. Stride 2: 2 branches -> cat -> shuffle."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.stride = stride
        mid = cout // 2
        if stride == 1:
            assert cin == cout, 'stride-1 unit keeps the width'
            bin_ = cin // 2
            self.branch1 = None
        else:
            bin_ = cin
            self.branch1 = nn.Sequential(
                conv_bn(cin, cin, 3, stride, groups=cin),
                conv_bn_relu(cin, mid, 1))
        self.branch2 = nn.Sequential(
            conv_bn_relu(bin_, mid, 1),
            conv_bn(mid, mid, 3, stride, groups=mid),
            conv_bn_relu(mid, mid, 1))

    def forward(self, x):
        if self.stride == 1:
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat((x1, self.branch2(x2)), 1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), 1)
        return channel_shuffle(out, 2)


class ShuffleNetV2(nn.Module):
    """chunk/shuffle couple channel positions across halves: the pruner must handle or freeze."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.stem = conv_bn_relu(3, 16, 3, 2)
        self.stage2 = nn.Sequential(ShuffleUnit(16, 32, 2), ShuffleUnit(32, 32, 1))
        self.stage3 = nn.Sequential(ShuffleUnit(32, 64, 2), ShuffleUnit(64, 64, 1))
        self.conv_last = conv_bn_relu(64, 128, 1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(128, num_classes)

    def forward(self, x):
        x = self.conv_last(self.stage3(self.stage2(self.stem(x))))
        return self.fc(self.pool(x).flatten(1))


# ---------------------------------------------------------------------------
# 8. ResNeXt
# ---------------------------------------------------------------------------
class ResNeXt(nn.Module):
    """Grouped 3x3 conv (groups=4): its channels can only be pruned uniformly per group."""

    def __init__(self, num_classes: int = 10, groups: int = 4):
        super().__init__()
        self.stem = conv_bn_relu(3, 16)
        self.layer1 = nn.Sequential(Bottleneck(16, 8, groups=groups, width=16),
                                    Bottleneck(32, 8, groups=groups, width=16))
        self.layer2 = nn.Sequential(Bottleneck(32, 16, stride=2, groups=groups, width=32),
                                    Bottleneck(64, 16, groups=groups, width=32))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(64, num_classes)

    def forward(self, x):
        x = self.layer2(self.layer1(self.stem(x)))
        return self.fc(self.avgpool(x).flatten(1))


# ---------------------------------------------------------------------------
# 9. FPN with a shared head
# ---------------------------------------------------------------------------
class SharedHead(nn.Module):
    """conv3x3-ReLU then two sibling 1x1 convs (cls, reg); one instance serves every level."""

    def __init__(self, cin: int, feat: int = 16, num_cls: int = 6, num_reg: int = 4):
        super().__init__()
        self.conv = nn.Conv2d(cin, feat, 3, 1, 1)
        self.relu = nn.ReLU(inplace=True)
        self.cls = nn.Conv2d(feat, num_cls, 1)
        self.reg = nn.Conv2d(feat, num_reg, 1)

    def forward(self, x):
        x = self.relu(self.conv(x))
        return self.cls(x), self.reg(x)


class FPNSharedHead(nn.Module):
    """FPN top-down adds tie all lateral outputs; the shared head ties all three levels together."""

    def __init__(self, fpn_channels: int = 16):
        super().__init__()
        self.c2 = conv_bn_relu(3, 16, 3, 2)    # 1/2
        self.c3 = conv_bn_relu(16, 32, 3, 2)   # 1/4
        self.c4 = conv_bn_relu(32, 64, 3, 2)   # 1/8
        self.lateral = nn.ModuleList(nn.Conv2d(c, fpn_channels, 1) for c in (16, 32, 64))
        self.output = nn.ModuleList(
            nn.Conv2d(fpn_channels, fpn_channels, 3, 1, 1) for _ in range(3))
        self.head = SharedHead(fpn_channels)

    def forward(self, x):
        c2 = self.c2(x)
        c3 = self.c3(c2)
        c4 = self.c4(c3)
        l2, l3, l4 = (lat(c) for lat, c in zip(self.lateral, (c2, c3, c4)))
        p4 = l4
        p3 = l3 + F.interpolate(p4, size=l3.shape[-2:], mode='nearest')
        p2 = l2 + F.interpolate(p3, size=l2.shape[-2:], mode='nearest')
        feats = [conv(p) for conv, p in zip(self.output, (p2, p3, p4))]
        cls, reg = [], []
        for f in feats:
            c, r = self.head(f)
            cls.append(c)
            reg.append(r)
        return {'cls': cls, 'reg': reg}


# ---------------------------------------------------------------------------
# 10. UNet
# ---------------------------------------------------------------------------
def double_conv(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(conv_bn_relu(cin, cout), conv_bn_relu(cout, cout))


class UNet(nn.Module):
    """ConvTranspose2d (weight is [in, out, k, k]) and skip concat [up, skip] into decoder convs."""

    def __init__(self, out_channels: int = 2):
        super().__init__()
        self.enc1 = double_conv(3, 8)
        self.enc2 = double_conv(8, 16)
        self.pool = nn.MaxPool2d(2)
        self.bottleneck = double_conv(16, 32)
        self.up2 = nn.ConvTranspose2d(32, 16, 2, 2)
        self.dec2 = double_conv(32, 16)
        self.up1 = nn.ConvTranspose2d(16, 8, 2, 2)
        self.dec1 = double_conv(16, 8)
        self.out = nn.Conv2d(8, out_channels, 1)

    def forward(self, x):
        s1 = self.enc1(x)
        s2 = self.enc2(self.pool(s1))
        b = self.bottleneck(self.pool(s2))
        d2 = self.dec2(torch.cat([self.up2(b), s2], 1))
        d1 = self.dec1(torch.cat([self.up1(d2), s1], 1))
        return self.out(d1)


# ---------------------------------------------------------------------------
# 11. VGG
# ---------------------------------------------------------------------------
class VGG(nn.Module):
    """flatten(1) of a C x 4 x 4 map: each conv channel owns 16 consecutive Linear inputs."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            conv_bn_relu(3, 16), nn.MaxPool2d(2),
            conv_bn_relu(16, 32), nn.MaxPool2d(2),
            conv_bn_relu(32, 32), nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(
            nn.Linear(32 * 4 * 4, 64), nn.ReLU(inplace=True), nn.Dropout(0.5),
            nn.Linear(64, num_classes))

    def forward(self, x):
        return self.classifier(self.features(x).flatten(1))


# ---------------------------------------------------------------------------
# 12. ViT
# ---------------------------------------------------------------------------
class Attention(nn.Module):
    """Fused qkv Linear; the (3, heads, head_dim) reshape fixes qkv/proj widths (must be frozen
    or pruned per head)."""

    def __init__(self, dim: int, num_heads: int):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim ** -0.5
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, _ = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = (q @ k.transpose(-2, -1)) * self.scale
        attn = attn.softmax(dim=-1)
        x = (attn @ v).transpose(1, 2).reshape(B, N, -1)
        return self.proj(x)


class Mlp(nn.Module):
    """Linear-GELU-Linear; the hidden width is freely prunable."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class TransformerBlock(nn.Module):
    """Pre-norm block: x + attn(norm1(x)); x + mlp(norm2(x))."""

    def __init__(self, dim: int, num_heads: int, mlp_ratio: int = 2):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, num_heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim, dim * mlp_ratio)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    """Embedding dim ties patch conv, cls_token, pos_embed, every residual and LayerNorm."""

    def __init__(self, num_classes: int = 10, dim: int = 32, depth: int = 2, num_heads: int = 4,
                 img_size: int = 32, patch: int = 4):
        super().__init__()
        num_patches = (img_size // patch) ** 2
        self.patch_embed = nn.Conv2d(3, dim, patch, patch)
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1, num_patches + 1, dim) * 0.02)
        self.blocks = nn.Sequential(*(TransformerBlock(dim, num_heads) for _ in range(depth)))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat([cls, x], dim=1) + self.pos_embed
        x = self.norm(self.blocks(x))
        return self.head(x[:, 0])


# ---------------------------------------------------------------------------
# 13. ConvNeXt
# ---------------------------------------------------------------------------
class LayerNorm2d(nn.Module):
    """Channels-first LayerNorm as permute -> nn.LayerNorm(C) -> permute."""

    def __init__(self, channels: int):
        super().__init__()
        self.norm = nn.LayerNorm(channels)

    def forward(self, x):
        return self.norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class ConvNeXtBlock(nn.Module):
    """dw7x7 -> permute -> LN -> Linear(C,4C) -> GELU -> Linear(4C,C) -> gamma * x -> permute +x."""

    def __init__(self, dim: int):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        shortcut = x
        x = self.dwconv(x).permute(0, 2, 3, 1)
        x = self.pwconv2(self.act(self.pwconv1(self.norm(x))))
        x = (self.gamma * x).permute(0, 3, 1, 2)
        return shortcut + x


class ConvNeXt(nn.Module):
    """Channels-last Linears and LayerNorm after permute, layer-scale gamma parameter."""

    def __init__(self, num_classes: int = 10, dims: Tuple[int, int] = (16, 32)):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, dims[0], 4, 4), LayerNorm2d(dims[0]))
        self.stage1 = nn.Sequential(ConvNeXtBlock(dims[0]), ConvNeXtBlock(dims[0]))
        self.downsample = nn.Sequential(LayerNorm2d(dims[0]), nn.Conv2d(dims[0], dims[1], 2, 2))
        self.stage2 = nn.Sequential(ConvNeXtBlock(dims[1]), ConvNeXtBlock(dims[1]))
        self.norm = nn.LayerNorm(dims[1])
        self.head = nn.Linear(dims[1], num_classes)

    def forward(self, x):
        x = self.stage2(self.downsample(self.stage1(self.stem(x))))
        return self.head(self.norm(x.mean((-2, -1))))


# ---------------------------------------------------------------------------
# 14. Conv1d + GroupNorm
# ---------------------------------------------------------------------------
class ConvGN1d(nn.Sequential):
    def __init__(self, cin: int, cout: int, stride: int = 1, relu: bool = True):
        layers = [nn.Conv1d(cin, cout, 3, stride, 1, bias=False), nn.GroupNorm(4, cout)]
        if relu:
            layers.append(nn.ReLU(inplace=True))
        super().__init__(*layers)


class ResBlock1d(nn.Module):
    """Conv1d-GN-ReLU-Conv1d-GN + x -> ReLU."""

    def __init__(self, channels: int):
        super().__init__()
        self.body = nn.Sequential(ConvGN1d(channels, channels),
                                  ConvGN1d(channels, channels, relu=False))
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        return self.relu(x + self.body(x))


class Conv1dGN(nn.Module):
    """GroupNorm(4 groups): channels can only be pruned keeping every group non-empty/even."""

    def __init__(self, num_classes: int = 5):
        super().__init__()
        self.stem = ConvGN1d(8, 16)
        self.block1 = ResBlock1d(16)
        self.down = ConvGN1d(16, 32, stride=2)
        self.block2 = ResBlock1d(32)
        self.pool = nn.AdaptiveAvgPool1d(1)
        self.fc = nn.Linear(32, num_classes)

    def forward(self, x):
        x = self.block2(self.down(self.block1(self.stem(x))))
        return self.fc(self.pool(x).flatten(1))


# ---------------------------------------------------------------------------
# 15. Frozen stem
# ---------------------------------------------------------------------------
class FrozenStem(nn.Module):
    """Stem conv+BN have requires_grad=False (like a detection backbone's frozen stage)."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.relu = nn.ReLU(inplace=True)
        for p in list(self.conv1.parameters()) + list(self.bn1.parameters()):
            p.requires_grad = False
        self.layer1 = BasicBlock(16, 16)
        self.layer2 = BasicBlock(16, 32, stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(32, num_classes)

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer2(self.layer1(x))
        return self.fc(self.avgpool(x).flatten(1))


# ---------------------------------------------------------------------------
# 16. Mixed consumers
# ---------------------------------------------------------------------------
class MixedConsumers(nn.Module):
    """One tensor feeds a conv, a depthwise conv, an add, pool->Linear and cat([x, x]) -> conv."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.stem = conv_bn_relu(3, 16)
        self.conv = conv_bn(16, 16)
        self.dwconv = conv_bn(16, 16, 3, groups=16)
        self.cat_conv = conv_bn(32, 16, 1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.aux_fc = nn.Linear(16, num_classes)
        self.fc = nn.Linear(16, num_classes)

    def forward(self, x):
        x = self.stem(x)
        y = self.conv(x) + self.dwconv(x) + x
        y = y + self.cat_conv(torch.cat([x, x], 1))
        aux = self.aux_fc(self.pool(x).flatten(1))
        return self.fc(self.pool(F.relu(y)).flatten(1)) + aux


# ---------------------------------------------------------------------------
# 17. Dead branch
# ---------------------------------------------------------------------------
class AuxHead(nn.Module):
    """conv-BN-ReLU -> pool -> Linear; in DeadBranch its output is discarded."""

    def __init__(self, cin: int, num_classes: int = 10):
        super().__init__()
        self.conv = conv_bn_relu(cin, 16)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, num_classes)

    def forward(self, x):
        return self.fc(self.pool(self.conv(x)).flatten(1))


class DeadBranch(nn.Module):
    """An aux head that runs but whose output is dropped, and a conv feature that is never used."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.stem = conv_bn_relu(3, 16)
        self.aux_head = AuxHead(16, num_classes)
        self.layer1 = conv_bn_relu(16, 32, 3, 2)
        self.unused_conv = nn.Conv2d(32, 8, 1)
        self.layer2 = conv_bn_relu(32, 32)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(32, num_classes)

    def forward(self, x):
        x = self.stem(x)
        aux = self.aux_head(x)  # noqa: F841  computed, then dropped
        x = self.layer1(x)
        unused = self.unused_conv(x)  # noqa: F841  computed, never used
        x = self.layer2(x)
        return self.fc(self.pool(x).flatten(1))


# ---------------------------------------------------------------------------
# 18. Conv3d
# ---------------------------------------------------------------------------
def conv3d_bn(cin: int, cout: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv3d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm3d(cout))


class ResBlock3d(nn.Module):
    """Conv3d-BN3d-ReLU-Conv3d-BN3d + x -> ReLU."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = conv3d_bn(channels, channels)
        self.conv2 = conv3d_bn(channels, channels)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        return self.relu(x + self.conv2(self.relu(self.conv1(x))))


class Conv3dNet(nn.Module):
    """5-D weights and BatchNorm3d; residual add over (N, C, D, H, W)."""

    def __init__(self, num_classes: int = 4):
        super().__init__()
        self.stem = nn.Sequential(conv3d_bn(3, 8), nn.ReLU(inplace=True))
        self.block = ResBlock3d(8)
        self.pool = nn.AdaptiveAvgPool3d(1)
        self.fc = nn.Linear(8, num_classes)

    def forward(self, x):
        return self.fc(self.pool(self.block(self.stem(x))).flatten(1))


# ---------------------------------------------------------------------------
# Registry
# ---------------------------------------------------------------------------
def _builder(cls: type, **kwargs) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        return randomize_norms(cls(**kwargs))
    build.__name__ = f'build_{cls.__name__}'
    return build


_IMG = _image(1, 3, 32, 32)

_ENTRIES = [
    ('resnet_basic', ResNetBasic, _IMG,
     'BasicBlock residual adds; 1x1 conv+BN downsample shortcut at stride 2; avgpool + Linear'),
    ('resnet_bottleneck', ResNetBottleneck, _IMG,
     'Bottleneck (expansion 4): free inner widths, residual-tied expanded outputs'),
    ('mobilenet_v2', MobileNetV2, _IMG,
     'inverted residuals, depthwise convs (in==out groups), ReLU6, expand ratios 1 and 6'),
    ('se_net', SENet, _IMG,
     'Squeeze-and-Excitation gates (1x1-conv and Linear variants), x * sigmoid gate, residual add'),
    ('densenet', DenseNet, _IMG,
     'dense blocks: torch.cat([x, new], 1) chains, transition layer'),
    ('inception', Inception, _IMG,
     '4-branch inception blocks (1x1, 3x3, 5x5 / double 3x3, pool-proj) concatenated, twice'),
    ('shufflenet_v2', ShuffleNetV2, _IMG,
     'chunk(2), cat, channel_shuffle via view/transpose/view; stride-2 two-branch units'),
    ('resnext', ResNeXt, _IMG,
     'ResNeXt bottlenecks with grouped 3x3 conv (groups=4)'),
    ('fpn_shared_head', FPNSharedHead, _IMG,
     '3-level FPN (laterals, nearest upsample + add, 3x3 outputs), ONE head shared across levels, '
     'dict-of-lists output'),
    ('unet', UNet, _IMG,
     '2-level UNet: ConvTranspose2d upsampling, skip concat [up, skip]; output 1x2x32x32'),
    ('vgg', VGG, _IMG,
     'conv-BN-ReLU-maxpool stack, flatten(1) of C x 4 x 4 into Linear-ReLU-Dropout-Linear'),
    ('vit', ViT, _IMG,
     'ViT: patch conv, cls_token cat, pos_embed add, fused qkv + head reshape, LayerNorm, '
     'MLP, cls-token head'),
    ('convnext', ConvNeXt, _IMG,
     'ConvNeXt: dw7x7, permute + LayerNorm + channels-last Linears, layer-scale gamma, '
     'LN+conv downsample'),
    ('conv1d_gn', Conv1dGN, _image(1, 8, 64),
     'Conv1d + GroupNorm(4) + residual add, AdaptiveAvgPool1d, Linear'),
    ('frozen_stem', FrozenStem, _IMG,
     'stem conv+BN with requires_grad=False, trainable BasicBlocks'),
    ('mixed_consumers', MixedConsumers, _IMG,
     'one tensor -> conv, depthwise conv, add, pool->Linear, and cat([x, x]) -> conv'),
    ('dead_branch', DeadBranch, _IMG,
     'aux head computed and dropped; conv feature computed but unused'),
    ('conv3d', Conv3dNet, _image(1, 3, 8, 16, 16),
     'Conv3d + BatchNorm3d + ReLU with a residual add'),
]

ZOO: Dict[str, ZooEntry] = {
    name: ZooEntry(name=name, build=_builder(cls), example_inputs=inputs, notes=notes)
    for name, cls, inputs, notes in _ENTRIES
}


#: The zoo models the default test tier sweeps (residual adds, an inverted-residual
#: depthwise net, concatenation, channel shuffle, attention heads); the sweeps run the
#: others in the slow tier (``pytest -m slow``), which the README's test command runs too.
DEFAULT_TIER = ('resnet_bottleneck', 'mobilenet_v2', 'densenet', 'shufflenet_v2', 'vit')


def tiered(name: str, param: Any = None):
    """The pytest param ``param`` (default: ``name``) of the zoo model ``name``, marked
    ``slow`` unless :data:`DEFAULT_TIER` holds ``name``."""
    import pytest
    marks = () if name in DEFAULT_TIER else (pytest.mark.slow, )
    return pytest.param(name if param is None else param, marks=marks)
