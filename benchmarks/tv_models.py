"""Compact copies of torchvision's classifiers, layer for layer, for the trace benchmark.

torchvision does not import against the CPU torch razorlib is tested on, so the
benchmark builds the same modules itself: the same convolutions (kernel, stride, groups,
bias), norms, activations, squeeze-excitation gates, concatenations, chunks, channel
shuffles, permutes and reshapes, in the same order as ``torchvision.models`` 0.2x
defines them (``densenet121``, ``efficientnet_b0``, ``regnet_y_400mf``,
``mobilenet_v2``, ``mnasnet1_0``, ``convnext_tiny``, ``vit_b_16``,
``shufflenet_v2_x1_0``, ``googlenet``; ConvNeXt and ViT are in ``tv_transformers.py``).
Only what tracing cannot see is left out: weight initialisation, and stochastic depth,
which is the identity in eval mode (as torchvision's ``StochasticDepth`` is there).
Parameter counts equal torchvision's.  :data:`MODELS` maps a display name to a builder.
"""
from functools import partial
from typing import Callable, Dict, List, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from tv_transformers import ConvNeXt, VisionTransformer


def conv_bn_act(cin: int, cout: int, k: int = 3, stride: int = 1, groups: int = 1,
                act: Optional[Callable[..., nn.Module]] = nn.ReLU, eps: float = 1e-5,
                padding: Optional[int] = None) -> nn.Sequential:
    """torchvision's ``Conv2dNormActivation``: conv (no bias), BatchNorm, activation."""
    layers = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2 if padding is None else padding,
                        groups=groups, bias=False), nn.BatchNorm2d(cout, eps=eps)]
    if act is not None:
        layers.append(act(inplace=True) if act in (nn.ReLU, nn.ReLU6, nn.SiLU) else act())
    return nn.Sequential(*layers)


def make_divisible(v: float, divisor: int = 8) -> int:
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


class SqueezeExcitation(nn.Module):
    """torchvision.ops.SqueezeExcitation: pool, 1x1 conv, act, 1x1 conv, gate, multiply."""

    def __init__(self, channels: int, squeeze: int, act=nn.ReLU, gate=nn.Sigmoid):
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1, self.fc2 = nn.Conv2d(channels, squeeze, 1), nn.Conv2d(squeeze, channels, 1)
        self.activation, self.scale_activation = act(), gate()

    def forward(self, x):
        scale = self.scale_activation(self.fc2(self.activation(self.fc1(self.avgpool(x)))))
        return scale * x


class Classifier(nn.Module):
    """A feature extractor, global pooling and a head, as most torchvision models end."""

    def __init__(self, features: nn.Module, head: nn.Module, relu: bool = False):
        super().__init__()
        self.features, self.classifier, self.relu = features, head, relu

    def forward(self, x):
        x = self.features(x)
        if self.relu:
            x = F.relu(x, inplace=True)
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


# ------------------------------------------------------------------ DenseNet-121
class DenseLayer(nn.Module):
    def __init__(self, cin: int, growth: int, bn_size: int):
        super().__init__()
        self.norm1, self.relu1 = nn.BatchNorm2d(cin), nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(cin, bn_size * growth, 1, bias=False)
        self.norm2, self.relu2 = nn.BatchNorm2d(bn_size * growth), nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(bn_size * growth, growth, 3, padding=1, bias=False)

    def forward(self, features: List[torch.Tensor]) -> torch.Tensor:
        x = torch.cat(features, 1)  # torchvision's bn_function
        x = self.conv1(self.relu1(self.norm1(x)))
        return self.conv2(self.relu2(self.norm2(x)))


class DenseBlock(nn.ModuleDict):
    def __init__(self, layers: int, cin: int, growth: int, bn_size: int):
        super().__init__({f'denselayer{i + 1}': DenseLayer(cin + i * growth, growth, bn_size)
                          for i in range(layers)})

    def forward(self, x):
        features = [x]
        for layer in self.values():
            features.append(layer(features))
        return torch.cat(features, 1)


def densenet121(num_classes: int = 1000) -> nn.Module:
    growth, bn_size, width = 32, 4, 64
    layers = [('conv0', nn.Conv2d(3, width, 7, 2, 3, bias=False)),
              ('norm0', nn.BatchNorm2d(width)), ('relu0', nn.ReLU(inplace=True)),
              ('pool0', nn.MaxPool2d(3, 2, 1))]
    for i, count in enumerate((6, 12, 24, 16)):
        layers.append((f'denseblock{i + 1}', DenseBlock(count, width, growth, bn_size)))
        width += count * growth
        if i != 3:
            layers.append((f'transition{i + 1}', nn.Sequential(
                nn.BatchNorm2d(width), nn.ReLU(inplace=True),
                nn.Conv2d(width, width // 2, 1, bias=False), nn.AvgPool2d(2, 2))))
            width //= 2
    layers.append(('norm5', nn.BatchNorm2d(width)))
    features = nn.Sequential()
    for name, module in layers:
        features.add_module(name, module)
    return Classifier(features, nn.Linear(width, num_classes), relu=True)


# ------------------------------------------------------------------ EfficientNet-B0
class MBConv(nn.Module):
    """torchvision's MBConv (stochastic depth: identity in eval)."""

    def __init__(self, cin: int, cout: int, expand: int, k: int, stride: int):
        super().__init__()
        mid = make_divisible(cin * expand)
        layers = [] if mid == cin else [conv_bn_act(cin, mid, 1, act=nn.SiLU)]
        layers += [conv_bn_act(mid, mid, k, stride, groups=mid, act=nn.SiLU),
                   SqueezeExcitation(mid, max(1, cin // 4), act=nn.SiLU),
                   conv_bn_act(mid, cout, 1, act=None)]
        self.block = nn.Sequential(*layers)
        self.use_res = stride == 1 and cin == cout
        self.stochastic_depth = nn.Identity()

    def forward(self, x):
        out = self.block(x)
        return self.stochastic_depth(out) + x if self.use_res else out


def efficientnet_b0(num_classes: int = 1000) -> nn.Module:
    stages = [(1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2),
              (6, 3, 2, 40, 80, 3), (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4),
              (6, 3, 1, 192, 320, 1)]
    layers = [conv_bn_act(3, 32, 3, 2, act=nn.SiLU)]
    for expand, k, stride, cin, cout, repeats in stages:
        layers.append(nn.Sequential(*[MBConv(cin if i == 0 else cout, cout, expand, k,
                                             stride if i == 0 else 1)
                                      for i in range(repeats)]))
    layers.append(conv_bn_act(320, 1280, 1, act=nn.SiLU))
    return Classifier(nn.Sequential(*layers),
                      nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes)))


# ------------------------------------------------------------------ RegNetY-400MF
class ResBottleneckBlock(nn.Module):
    """torchvision's RegNet block: 1x1, grouped 3x3, SE, 1x1, projection shortcut."""

    def __init__(self, cin: int, cout: int, stride: int, group_width: int, se_ratio: float):
        super().__init__()
        self.proj = (conv_bn_act(cin, cout, 1, stride, act=None)
                     if cin != cout or stride != 1 else None)
        groups = cout // group_width
        self.f = nn.Sequential(
            conv_bn_act(cin, cout, 1), conv_bn_act(cout, cout, 3, stride, groups=groups),
            SqueezeExcitation(cout, int(round(se_ratio * cin))),
            conv_bn_act(cout, cout, 1, act=None))
        self.activation = nn.ReLU(inplace=True)

    def forward(self, x):
        shortcut = self.proj(x) if self.proj is not None else x
        return self.activation(shortcut + self.f(x))


def regnet_y_400mf(num_classes: int = 1000) -> nn.Module:
    """Stage widths and depths from torchvision's BlockParams for 400MF (w_0=48,
    w_a=27.89, w_m=2.09, group width 8, SE ratio 0.25)."""
    stem = conv_bn_act(3, 32, 3, 2)
    stages, cin = [], 32
    for width, depth in zip((48, 104, 208, 440), (1, 3, 6, 6)):
        stages.append(nn.Sequential(*[ResBottleneckBlock(cin if i == 0 else width, width,
                                                         2 if i == 0 else 1, 8, 0.25)
                                      for i in range(depth)]))
        cin = width
    return Classifier(nn.Sequential(stem, *stages), nn.Linear(cin, num_classes))


# ------------------------------------------------------------------ MobileNetV2
class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int):
        super().__init__()
        mid = cin * expand
        layers = [] if expand == 1 else [conv_bn_act(cin, mid, 1, act=nn.ReLU6)]
        layers += [conv_bn_act(mid, mid, 3, stride, groups=mid, act=nn.ReLU6),
                   nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.conv = nn.Sequential(*layers)
        self.use_res = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.conv(x) if self.use_res else self.conv(x)


def mobilenet_v2(num_classes: int = 1000) -> nn.Module:
    settings = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                (6, 160, 3, 2), (6, 320, 1, 1)]
    layers, cin = [conv_bn_act(3, 32, 3, 2, act=nn.ReLU6)], 32
    for t, c, n, s in settings:
        for i in range(n):
            layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
            cin = c
    layers.append(conv_bn_act(cin, 1280, 1, act=nn.ReLU6))
    return Classifier(nn.Sequential(*layers),
                      nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes)))


# ------------------------------------------------------------------ MNASNet-1.0
class MnasResidual(nn.Module):
    def __init__(self, cin: int, cout: int, k: int, stride: int, expand: int):
        super().__init__()
        mid = cin * expand
        self.apply_residual = cin == cout and stride == 1
        self.layers = nn.Sequential(
            nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU(inplace=True),
            nn.Conv2d(mid, mid, k, stride, k // 2, groups=mid, bias=False),
            nn.BatchNorm2d(mid), nn.ReLU(inplace=True),
            nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        return self.layers(x) + x if self.apply_residual else self.layers(x)


class MNASNet(nn.Module):
    def __init__(self, num_classes: int = 1000):
        super().__init__()
        stacks = [(16, 24, 3, 2, 3, 3), (24, 40, 5, 2, 3, 3), (40, 80, 5, 2, 6, 3),
                  (80, 96, 3, 1, 6, 2), (96, 192, 5, 2, 6, 4), (192, 320, 3, 1, 6, 1)]
        layers = [nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32),
                  nn.ReLU(inplace=True),
                  nn.Conv2d(32, 32, 3, 1, 1, groups=32, bias=False), nn.BatchNorm2d(32),
                  nn.ReLU(inplace=True), nn.Conv2d(32, 16, 1, bias=False), nn.BatchNorm2d(16)]
        for cin, cout, k, stride, expand, repeats in stacks:
            layers.append(nn.Sequential(*[MnasResidual(cin if i == 0 else cout, cout, k,
                                                       stride if i == 0 else 1, expand)
                                          for i in range(repeats)]))
        layers += [nn.Conv2d(320, 1280, 1, bias=False), nn.BatchNorm2d(1280),
                   nn.ReLU(inplace=True)]
        self.layers = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes))

    def forward(self, x):
        return self.classifier(self.layers(x).mean([2, 3]))


# ------------------------------------------------------------------ ShuffleNetV2 x1.0
def channel_shuffle(x: torch.Tensor, groups: int) -> torch.Tensor:
    b, c, h, w = x.size()
    x = x.view(b, groups, c // groups, h, w)
    x = torch.transpose(x, 1, 2).contiguous()
    return x.view(b, -1, h, w)


class ShuffleUnit(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.stride, half = stride, cout // 2
        if stride > 1:
            self.branch1 = nn.Sequential(
                nn.Conv2d(cin, cin, 3, stride, 1, groups=cin, bias=False), nn.BatchNorm2d(cin),
                nn.Conv2d(cin, half, 1, bias=False), nn.BatchNorm2d(half), nn.ReLU(inplace=True))
        else:
            self.branch1 = nn.Sequential()
        self.branch2 = nn.Sequential(
            nn.Conv2d(cin if stride > 1 else half, half, 1, bias=False), nn.BatchNorm2d(half),
            nn.ReLU(inplace=True),
            nn.Conv2d(half, half, 3, stride, 1, groups=half, bias=False), nn.BatchNorm2d(half),
            nn.Conv2d(half, half, 1, bias=False), nn.BatchNorm2d(half), nn.ReLU(inplace=True))

    def forward(self, x):
        if self.stride == 1:
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat((x1, self.branch2(x2)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        return channel_shuffle(out, 2)


class ShuffleNetV2(nn.Module):
    def __init__(self, repeats=(4, 8, 4), widths=(24, 116, 232, 464, 1024),
                 num_classes: int = 1000):
        super().__init__()
        self.conv1 = conv_bn_act(3, widths[0], 3, 2)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        cin = widths[0]
        for i, (count, cout) in enumerate(zip(repeats, widths[1:4])):
            setattr(self, f'stage{i + 2}', nn.Sequential(
                *[ShuffleUnit(cin if j == 0 else cout, cout, 2 if j == 0 else 1)
                  for j in range(count)]))
            cin = cout
        self.conv5 = conv_bn_act(cin, widths[-1], 1)
        self.fc = nn.Linear(widths[-1], num_classes)

    def forward(self, x):
        x = self.maxpool(self.conv1(x))
        x = self.conv5(self.stage4(self.stage3(self.stage2(x))))
        return self.fc(x.mean([2, 3]))


# ------------------------------------------------------------------ GoogLeNet
BasicConv2d = partial(conv_bn_act, eps=0.001, padding=None)


class Inception(nn.Module):
    def __init__(self, cin, ch1x1, ch3x3red, ch3x3, ch5x5red, ch5x5, pool_proj):
        super().__init__()
        self.branch1 = BasicConv2d(cin, ch1x1, 1)
        self.branch2 = nn.Sequential(BasicConv2d(cin, ch3x3red, 1),
                                     BasicConv2d(ch3x3red, ch3x3, 3))
        # torchvision uses a 3x3 here too (a known quirk it keeps for its weights)
        self.branch3 = nn.Sequential(BasicConv2d(cin, ch5x5red, 1),
                                     BasicConv2d(ch5x5red, ch5x5, 3))
        self.branch4 = nn.Sequential(nn.MaxPool2d(3, 1, 1, ceil_mode=True),
                                     BasicConv2d(cin, pool_proj, 1))

    def forward(self, x):
        return torch.cat([self.branch1(x), self.branch2(x), self.branch3(x), self.branch4(x)], 1)


class InceptionAux(nn.Module):
    def __init__(self, cin: int, num_classes: int):
        super().__init__()
        self.conv = BasicConv2d(cin, 128, 1)
        self.fc1, self.fc2 = nn.Linear(2048, 1024), nn.Linear(1024, num_classes)
        self.dropout = nn.Dropout(0.7)

    def forward(self, x):
        x = torch.flatten(self.conv(F.adaptive_avg_pool2d(x, (4, 4))), 1)
        return self.fc2(self.dropout(F.relu(self.fc1(x), inplace=True)))


class GoogLeNet(nn.Module):
    """torchvision's default ``googlenet()``: auxiliary heads built, run in training only."""

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        self.conv1 = BasicConv2d(3, 64, 7, 2)
        self.maxpool1 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv2 = BasicConv2d(64, 64, 1)
        self.conv3 = BasicConv2d(64, 192, 3)
        self.maxpool2 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.inception3a = Inception(192, 64, 96, 128, 16, 32, 32)
        self.inception3b = Inception(256, 128, 128, 192, 32, 96, 64)
        self.maxpool3 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.inception4a = Inception(480, 192, 96, 208, 16, 48, 64)
        self.inception4b = Inception(512, 160, 112, 224, 24, 64, 64)
        self.inception4c = Inception(512, 128, 128, 256, 24, 64, 64)
        self.inception4d = Inception(512, 112, 144, 288, 32, 64, 64)
        self.inception4e = Inception(528, 256, 160, 320, 32, 128, 128)
        self.maxpool4 = nn.MaxPool2d(2, 2, ceil_mode=True)
        self.inception5a = Inception(832, 256, 160, 320, 32, 128, 128)
        self.inception5b = Inception(832, 384, 192, 384, 48, 128, 128)
        self.aux1, self.aux2 = InceptionAux(512, num_classes), InceptionAux(528, num_classes)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.dropout = nn.Dropout(0.2)
        self.fc = nn.Linear(1024, num_classes)

    def forward(self, x):
        x = self.maxpool1(self.conv1(x))
        x = self.maxpool2(self.conv3(self.conv2(x)))
        x = self.maxpool3(self.inception3b(self.inception3a(x)))
        x = self.inception4a(x)
        aux1 = self.aux1(x) if self.training else None
        x = self.inception4d(self.inception4c(self.inception4b(x)))
        aux2 = self.aux2(x) if self.training else None
        x = self.maxpool4(self.inception4e(x))
        x = self.inception5b(self.inception5a(x))
        x = self.fc(self.dropout(torch.flatten(self.avgpool(x), 1)))
        return (x, aux2, aux1) if self.training else x


#: display name -> builder of a 1000-class model.
MODELS: Dict[str, Callable[[], nn.Module]] = {
    'DenseNet-121': densenet121,
    'EfficientNet-B0': efficientnet_b0,
    'RegNetY-400MF': regnet_y_400mf,
    'MobileNetV2': mobilenet_v2,
    'MNASNet-1.0': MNASNet,
    'ConvNeXt-T': ConvNeXt,
    'ViT-B/16': VisionTransformer,
    'ShuffleNetV2-1.0': ShuffleNetV2,
    'GoogLeNet': GoogLeNet,
}
