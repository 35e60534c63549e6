"""Pruning: masks, structure pruners, channel configs and physical slicing."""
from .api import prune
from .channel_config import ChannelConfig, ChannelSelection
from .l1 import L1NormPruner
from .masks import remove_masks
from .ratio import AUTOSLIM_RATIOS, RatioPruner
from .slicing import SLICERS, slim_model
from .structure import StructurePruner

__all__ = [
    'AUTOSLIM_RATIOS', 'ChannelConfig', 'ChannelSelection', 'L1NormPruner', 'RatioPruner',
    'SLICERS', 'StructurePruner', 'prune', 'remove_masks', 'slim_model'
]
