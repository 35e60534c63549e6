"""Backbones, one file per family, registered by name in ``razorlib.registry.MODELS``."""
from .base import BaseBackbone, ConvBNAct, make_divisible, make_stem
from .mobilenet_v2 import InvertedResidual, MobileNetV2
from .plain_cnn import PlainCNN
from .resnet import BasicBlock, Bottleneck, ResNet
from .shufflenet_v2 import ShuffleNetV2, ShuffleUnit, channel_shuffle

__all__ = [
    'BaseBackbone', 'BasicBlock', 'Bottleneck', 'ConvBNAct', 'InvertedResidual',
    'MobileNetV2', 'PlainCNN', 'ResNet', 'ShuffleNetV2', 'ShuffleUnit', 'channel_shuffle',
    'make_divisible', 'make_stem'
]
