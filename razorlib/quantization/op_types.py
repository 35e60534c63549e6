"""Groups of ONNX op types that the dispatch and quantization rules speak of.

Example:
    >>> 'Conv' in COMPUTE_TYPES, 'Relu' in POINTWISE_TYPES, 'Reshape' in PASSIVE_TYPES
    (True, True, True)
"""
from typing import FrozenSet

__all__ = [
    'COMPUTE_TYPES', 'CONSTANT_TYPES', 'FUSED_ACTIVATION_TYPES', 'PASSIVE_TYPES',
    'POINTWISE_TYPES', 'POOLING_TYPES'
]

COMPUTE_TYPES: FrozenSet[str] = frozenset({'Conv', 'ConvTranspose', 'Gemm', 'MatMul'})
"""The ops that do the heavy arithmetic: convolutions and matrix products."""

FUSED_ACTIVATION_TYPES: FrozenSet[str] = frozenset({'Relu', 'Clip'})
"""Activations a backend fuses into the compute op before them (conv + relu)."""

POINTWISE_TYPES: FrozenSet[str] = frozenset({
    'Relu', 'Clip', 'Sigmoid', 'Tanh', 'LeakyRelu', 'PRelu', 'HardSigmoid', 'HardSwish', 'Elu',
    'Selu', 'Gelu', 'Softplus', 'Add', 'Sub', 'Mul', 'Div', 'BatchNormalization'
})
"""Element-wise ops: each output element depends on the same element of each input."""

POOLING_TYPES: FrozenSet[str] = frozenset({'MaxPool', 'AveragePool', 'GlobalAveragePool'})
"""Spatial pooling."""

PASSIVE_TYPES: FrozenSet[str] = frozenset({
    'MaxPool', 'GlobalMaxPool', 'Reshape', 'Flatten', 'Transpose', 'Squeeze', 'Unsqueeze',
    'Slice', 'Split', 'Pad', 'Resize', 'Gather', 'Expand', 'Tile'
})
"""Data-movement ops: their outputs hold (a selection of) input values, at the same scale."""

CONSTANT_TYPES: FrozenSet[str] = frozenset({'Constant'})
"""Ops that produce a constant; their outputs are as good as parameters."""
