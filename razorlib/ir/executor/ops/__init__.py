"""Torch kernels of ONNX ops, one module per family; importing them fills ``OP_TABLE``."""
from . import activation, elementwise, indexing, linear, norm, pooling, reduce, resize, shape

__all__ = ['activation', 'elementwise', 'indexing', 'linear', 'norm', 'pooling', 'reduce',
           'resize', 'shape']
