"""Hooks for mmengine's Runner, registered in ``razorlib.registry.HOOKS``; ``SearchHook``
names the stages razorlib's search loops call."""
from .dump_subnet import DumpSubnetHook
from .epoch_seed import EpochSeedHook
from .resource_estimator import ResourceEstimatorHook
from .search_hook import SEARCH_STAGES, SearchHook
from .slim_export import SlimExportHook

__all__ = ['DumpSubnetHook', 'EpochSeedHook', 'ResourceEstimatorHook', 'SEARCH_STAGES',
           'SearchHook', 'SlimExportHook']
