"""Utilities: FLOPs / parameter counting, batch-norm statistics."""
from .batch_norm import preserved_bn_stats
from .complexity import Complexity, count_params, get_model_complexity

__all__ = ['Complexity', 'count_params', 'get_model_complexity', 'preserved_bn_stats']
