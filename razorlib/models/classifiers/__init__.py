"""Classifiers: whole models that mmengine's Runner trains and evaluates."""
from .image_classifier import ImageClassifier

__all__ = ['ImageClassifier']
