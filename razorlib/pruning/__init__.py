"""Pruning: masks, structure pruners, importance criteria, budgets, channel configs and
physical slicing."""
from .allocation import Allocation, WidthRule, allocate
from .api import prune
from .channel_config import ChannelConfig, ChannelSelection
from .importance import Importance, build_importance
from .importance.pruner import ImportancePruner
from .l1 import L1NormPruner
from .masks import remove_masks
from .ratio import AUTOSLIM_RATIOS, RatioPruner
from .slicing import slim_model
from .structure import StructurePruner

__all__ = [
    'AUTOSLIM_RATIOS', 'Allocation', 'ChannelConfig', 'ChannelSelection', 'Importance',
    'ImportancePruner', 'L1NormPruner', 'RatioPruner', 'StructurePruner', 'WidthRule',
    'allocate', 'build_importance', 'prune', 'remove_masks', 'slim_model'
]
