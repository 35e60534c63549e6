"""Training engine: checkpoint loading, config checks, hooks and loops for mmengine's Runner."""
from .checkpoint import CHECKPOINT_GLOBALS, checkpoint_getattr, register_checkpoint_globals
from .hooks import (DumpSubnetHook, EpochSeedHook, ResourceEstimatorHook, SearchHook,
                    SlimExportHook)
from .loops import EvolutionSearchLoop, GreedySearchLoop, SubnetValLoop

__all__ = ['CHECKPOINT_GLOBALS', 'DumpSubnetHook', 'EpochSeedHook', 'EvolutionSearchLoop',
           'GreedySearchLoop', 'ResourceEstimatorHook', 'SearchHook', 'SlimExportHook',
           'SubnetValLoop', 'checkpoint_getattr', 'register_checkpoint_globals']
