"""Models: backbones, necks, heads, data preprocessor and classifiers, all registered in
``razorlib.registry.MODELS``."""
from .backbones import (BaseBackbone, BasicBlock, Bottleneck, ConvBNAct, InvertedResidual,
                        MobileNetV2, PlainCNN, ResNet, ShuffleNetV2, ShuffleUnit,
                        channel_shuffle, make_divisible, make_stem)
from .classifiers import ImageClassifier
from .data_preprocessor import ClsDataPreprocessor
from .data_sample import ClsDataSample
from .heads import LinearClsHead
from .necks import GlobalAveragePooling

__all__ = [
    'BaseBackbone', 'BasicBlock', 'Bottleneck', 'ClsDataPreprocessor', 'ClsDataSample',
    'ConvBNAct', 'GlobalAveragePooling', 'ImageClassifier', 'InvertedResidual',
    'LinearClsHead', 'MobileNetV2', 'PlainCNN', 'ResNet', 'ShuffleNetV2', 'ShuffleUnit',
    'channel_shuffle', 'make_divisible', 'make_stem'
]
