"""Utilities: FLOPs / parameter counting, batch-norm statistics, modes restored module by
module, atomic file writes, an error's first line to quote in another message, and the
checks of numeric settings (:mod:`razorlib.utils.checks`)."""
from .batch_norm import preserved_bn_stats, reestimate_bn_stats
from .complexity import Complexity, count_params, get_model_complexity
from .errors import first_line
from .files import atomic_write_text
from .modes import evaluating, kept_modes

__all__ = ['Complexity', 'atomic_write_text', 'count_params', 'evaluating', 'first_line',
           'get_model_complexity', 'kept_modes', 'preserved_bn_stats', 'reestimate_bn_stats']
