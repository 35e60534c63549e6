"""Candidate ops and dynamic blocks of the search spaces, registered in ``MODELS``."""
from .dynamic_stage import DynamicStage
from .mbconv import DynamicMBConv, MBConvBlock
from .shuffle_blocks import DynamicShuffleBlock, ShuffleBlock, ShuffleXception

__all__ = ['DynamicMBConv', 'DynamicShuffleBlock', 'DynamicStage', 'MBConvBlock', 'ShuffleBlock',
           'ShuffleXception']
