"""Hooks for mmengine's Runner, registered in ``razorlib.registry.HOOKS``."""
from .dump_subnet import DumpSubnetHook
from .epoch_seed import EpochSeedHook
from .resource_estimator import ResourceEstimatorHook

__all__ = ['DumpSubnetHook', 'EpochSeedHook', 'ResourceEstimatorHook']
