"""Evaluation metrics, registered in ``razorlib.registry.METRICS``."""
from .accuracy import Accuracy

__all__ = ['Accuracy']
