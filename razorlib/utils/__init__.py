"""Utilities: FLOPs / parameter counting."""
from .complexity import Complexity, count_params, get_model_complexity

__all__ = ['Complexity', 'count_params', 'get_model_complexity']
