"""Mutables: modules whose structure is a choice that a search space samples and sets."""
from .base import Choice, MutableChoice
from .channel import OneShotMutableChannel
from .one_shot_op import DiffMutableOP, OneShotMutableOP
from .value import OneShotMutableValue

__all__ = ['Choice', 'DiffMutableOP', 'MutableChoice', 'OneShotMutableChannel',
           'OneShotMutableOP', 'OneShotMutableValue']
