"""Searchable backbones (supernets), registered in ``MODELS``."""
from .mobilenet import MBCONV_IMAGENET_SETTING, SearchableMobileNet
from .shufflenet import SPOS_CANDIDATES, SPOS_IMAGENET_SETTING, SearchableShuffleNetV2

__all__ = ['MBCONV_IMAGENET_SETTING', 'SPOS_CANDIDATES', 'SPOS_IMAGENET_SETTING',
           'SearchableMobileNet', 'SearchableShuffleNetV2']
