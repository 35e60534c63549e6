"""Activations: ReLU family, Clip, sigmoids, GELU, Softmax and friends."""
import math
from typing import Callable, Dict, List

import torch
import torch.nn.functional as F

from ...operation import Operation
from ..kernels import register_function, register_kernel
from .common import reader

__all__: List[str] = []

_FUNCTIONS: Dict[str, Callable] = {
    'Relu': torch.relu, 'Sigmoid': torch.sigmoid, 'Tanh': torch.tanh,
    'HardSwish': F.hardswish, 'Softplus': F.softplus, 'Softsign': F.softsign,
    'Mish': F.mish,
}

for _op_type, _function in _FUNCTIONS.items():
    register_function(_function, _op_type)


def _prelu(x: torch.Tensor, slope: torch.Tensor) -> torch.Tensor:
    """PRelu: the slope broadcasts to x (ONNX), not along dim 1 only (torch)."""
    return torch.where(x < 0, x * slope, x)


register_function(_prelu, 'PRelu')


#: ONNX op type -> (torch function taking ``alpha``, ONNX's default ``alpha``).
_WITH_ALPHA = {'LeakyRelu': (F.leaky_relu, 0.01), 'Elu': (F.elu, 1.0), 'Celu': (F.celu, 1.0)}


@register_kernel(*_WITH_ALPHA)
def _with_alpha(op: Operation, device: torch.device):
    function, default = _WITH_ALPHA[op.type]
    alpha = op.attributes.get('alpha', default)
    return lambda x: function(x, alpha)


@register_kernel('Selu')
def _selu(op: Operation, device: torch.device):
    alpha = op.attributes.get('alpha', 1.67326319217681884765625)
    gamma = op.attributes.get('gamma', 1.05070102214813232421875)
    return lambda x: gamma * torch.where(x > 0, x, alpha * torch.expm1(x))


@register_kernel('ThresholdedRelu')
def _thresholded_relu(op: Operation, device: torch.device):
    alpha = op.attributes.get('alpha', 1.0)
    return lambda x: torch.where(x > alpha, x, torch.zeros_like(x))


@register_kernel('HardSigmoid')
def _hard_sigmoid(op: Operation, device: torch.device):
    alpha, beta = op.attributes.get('alpha', 0.2), op.attributes.get('beta', 0.5)
    return lambda x: torch.clamp(x * alpha + beta, 0, 1)


@register_kernel('Gelu')
def _gelu(op: Operation, device: torch.device):
    approximate = op.attributes.get('approximate', 'none')
    return lambda x: F.gelu(x, approximate=approximate)


def _scalar(tensor: torch.Tensor):
    return tensor.item()


@register_kernel('Clip')
def _clip(op: Operation, device: torch.device):
    """Bounds are inputs 1 and 2 (opset 11+) or attributes ``min``/``max`` (before)."""
    low = reader(op, 1, convert=_scalar, attribute='min')
    high = reader(op, 2, convert=_scalar, attribute='max')

    def kernel(*inputs):
        lower, upper = low(inputs), high(inputs)
        if lower is None and upper is None:
            return inputs[0]
        return torch.clamp(inputs[0], lower, upper)
    return kernel


def _softmax_kernel(op: Operation, function: Callable):
    """Softmax/LogSoftmax: along ``axis`` from opset 13; on the 2-D flattening before."""
    if op.opset.version >= 13:
        axis = op.attributes.get('axis', -1)
        return lambda x: function(x, axis)
    axis = op.attributes.get('axis', 1)

    def kernel(x):
        flat = x.reshape(math.prod(x.shape[:axis % max(x.dim(), 1)]), -1)
        return function(flat, 1).reshape(x.shape)
    return kernel


@register_kernel('Softmax')
def _softmax(op: Operation, device: torch.device):
    return _softmax_kernel(op, torch.softmax)


@register_kernel('LogSoftmax')
def _log_softmax(op: Operation, device: torch.device):
    return _softmax_kernel(op, torch.log_softmax)
