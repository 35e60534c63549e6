"""Importance criteria: which channels of each group are worth keeping.

Registered in :data:`razorlib.registry.IMPORTANCES` by class name and short alias;
:func:`build_importance` takes either, a config dict or an instance.

==============  ==========================================  ============
alias           criterion                                   reads
==============  ==========================================  ============
``l1``, ``l2``  weight magnitude                            weights
``bn_scale``    ``|gamma|`` of the norms (network slimming)  weights
``fpgm``        distance to the filters' geometric median   weights
``taylor``      first-order Taylor on gates                 data, loss
``fisher``      GroupFisher over FLOPs or memory            data, loss
``activation``  mean ``|activation|``                       data
``apoz``        one minus the share of zero activations     data
``wanda``       ``|W|`` times the input's activation norm   data
``random``      seeded uniform scores (the baseline)        nothing
==============  ==========================================  ============
"""
from ..data import default_loss
from .activation import APoZImportance, ActivationImportance, ActivationMagnitudeImportance
from .base import (NORMALIZERS, REDUCTIONS, Importance, ImportanceArg, ImportanceContext,
                   build_importance, lamp)
from .baseline import RandomImportance
from .gradient import FisherImportance, TaylorImportance
from .magnitude import BNScaleImportance, FPGMImportance, L1Importance, L2Importance

__all__ = [
    'Importance', 'ImportanceArg', 'ImportanceContext', 'build_importance', 'default_loss',
    'lamp', 'NORMALIZERS', 'REDUCTIONS', 'L1Importance', 'L2Importance', 'BNScaleImportance',
    'FPGMImportance', 'TaylorImportance', 'FisherImportance', 'ActivationImportance',
    'APoZImportance', 'ActivationMagnitudeImportance', 'RandomImportance'
]
