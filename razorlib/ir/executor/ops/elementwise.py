"""Element-wise arithmetic, comparisons and logic, with ONNX's broadcasting (as torch's)."""
import functools
from typing import Callable, Dict, List

import torch

from ...operation import Operation
from ..kernels import register_function, register_kernel

__all__: List[str] = []


def _div(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """ONNX Div: true division for floats, truncation toward zero for integers."""
    if a.is_floating_point() or a.is_complex():
        return torch.div(a, b)
    return torch.div(a, b, rounding_mode='trunc')


def _pow(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """ONNX Pow: the result has the base's type."""
    out = torch.pow(a, b)
    return out if out.dtype == a.dtype else out.to(a.dtype)


_FUNCTIONS: Dict[str, Callable] = {
    # Binary, broadcasting.
    'Add': torch.add, 'Sub': torch.sub, 'Mul': torch.mul, 'Div': _div, 'Pow': _pow,
    'Equal': torch.eq, 'Less': torch.lt, 'LessOrEqual': torch.le, 'Greater': torch.gt,
    'GreaterOrEqual': torch.ge, 'And': torch.logical_and, 'Or': torch.logical_or,
    'Xor': torch.logical_xor, 'Where': torch.where,
    # Unary.
    'Abs': torch.abs, 'Neg': torch.neg, 'Sqrt': torch.sqrt, 'Reciprocal': torch.reciprocal,
    'Exp': torch.exp, 'Log': torch.log, 'Erf': torch.erf, 'Floor': torch.floor,
    'Ceil': torch.ceil, 'Round': torch.round, 'Sign': torch.sign, 'Not': torch.logical_not,
    'Sin': torch.sin, 'Cos': torch.cos, 'IsNaN': torch.isnan,
    # Variadic.
    'Max': lambda *xs: functools.reduce(torch.maximum, xs),
    'Min': lambda *xs: functools.reduce(torch.minimum, xs),
    'Sum': lambda *xs: functools.reduce(torch.add, xs),
    'Mean': lambda *xs: functools.reduce(torch.add, xs) / len(xs),
}

for _op_type, _function in _FUNCTIONS.items():
    register_function(_function, _op_type)


@register_kernel('Mod')
def _mod(op: Operation, device: torch.device):
    """fmod=1: the sign of the dividend (C fmod); fmod=0: the sign of the divisor."""
    return torch.fmod if op.attributes.get('fmod', 0) else torch.remainder
