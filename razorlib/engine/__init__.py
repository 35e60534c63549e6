"""Training engine: checkpoint loading, config checks and hooks for mmengine's Runner."""
from .checkpoint import CHECKPOINT_GLOBALS, checkpoint_getattr, register_checkpoint_globals
from .hooks import DumpSubnetHook, EpochSeedHook, ResourceEstimatorHook

__all__ = ['CHECKPOINT_GLOBALS', 'DumpSubnetHook', 'EpochSeedHook', 'ResourceEstimatorHook',
           'checkpoint_getattr', 'register_checkpoint_globals']
