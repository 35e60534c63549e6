"""The op table: ONNX op type -> the builder of its torch kernel, in the KERNELS registry.

A *kernel builder* takes an :class:`~razorlib.ir.operation.Operation` and the executor's
device once, when the executor is built, reads the operation's attributes and constant
control inputs, and returns a *kernel*: a function of the operation's input tensors (None
for an absent optional input) that returns its output tensor, or a sequence of them.
Builders live in :data:`razorlib.registry.KERNELS`; ops of the default domain are keyed by
type (``'Conv'``), ops of other domains by ``'domain::Type'``.  :data:`OP_TABLE` is the
registry's own dict, for reading.

Example:
    >>> import torch
    >>> from razorlib.ir import Operation
    >>> build_kernel(Operation('r', 'Relu'), torch.device('cpu'))(torch.tensor([-1., 2.]))
    tensor([0., 2.])
"""
from typing import Callable, Dict, Optional, Sequence, Union

import torch

from ...registry import KERNELS
from ..operation import Operation

__all__ = ['KERNELS', 'Kernel', 'KernelBuilder', 'OP_TABLE', 'UnsupportedOperationError',
           'build_kernel', 'register_function', 'register_kernel', 'table_key']

Kernel = Callable[..., Union[torch.Tensor, Sequence[torch.Tensor]]]
KernelBuilder = Callable[[Operation, torch.device], Kernel]

OP_TABLE: Dict[str, KernelBuilder] = KERNELS.module_dict
"""Op type (``'domain::Type'`` outside the default domain) -> kernel builder: the
:data:`~razorlib.registry.KERNELS` registry's dict."""


class UnsupportedOperationError(NotImplementedError):
    """The executor has no kernel for an operation, or not for its attributes.

    Args:
        op: the operation.
        detail: what about it is unsupported; by default its op type.

    Example:
        >>> str(UnsupportedOperationError(Operation('n1', 'Foo')))
        "no torch kernel for op type 'Foo' (node 'n1'); register one with @register_kernel('Foo')"
    """

    def __init__(self, op: Operation, detail: Optional[str] = None) -> None:
        self.op_type, self.node = op.type, op.name
        domain = f' of domain {op.opset.domain!r}' if op.opset.domain else ''
        if detail is None:
            super().__init__(f'no torch kernel for op type {op.type!r}{domain} (node '
                             f'{op.name!r}); register one with '
                             f'@register_kernel({table_key(op)!r})')
        else:
            super().__init__(f'{op.type} node {op.name!r}: {detail} is not supported')


def table_key(op: Operation) -> str:
    """The key of ``op`` in :data:`OP_TABLE`."""
    domain = op.opset.domain  # '' for the default domain, however it was spelt
    return f'{domain}::{op.type}' if domain else op.type


def register_kernel(*keys: str, force: bool = False
                    ) -> Callable[[KernelBuilder], KernelBuilder]:
    """Decorator: register a kernel builder in :data:`~razorlib.registry.KERNELS` under
    each of ``keys``.

    Args:
        *keys: op types (``'domain::Type'`` outside the default domain).
        force: replace a builder registered under a key already; without it that raises
            ``KeyError``.

    Example:
        >>> from razorlib.ir import Opset
        >>> @register_kernel('com.example::Scale')
        ... def build_scale(op, device):
        ...     factor = op.attributes.get('factor', 1.0)
        ...     return lambda x: x * factor
        >>> op = Operation('s', 'Scale', {'factor': 3.0}, opset=Opset(1, 'com.example'))
        >>> build_kernel(op, torch.device('cpu'))(torch.ones(2))
        tensor([3., 3.])
        >>> del OP_TABLE['com.example::Scale']
    """
    def register(builder: KernelBuilder) -> KernelBuilder:
        KERNELS.register_module(name=list(keys), force=force, module=builder)
        return builder
    return register


def register_function(function: Kernel, *keys: str, force: bool = False) -> None:
    """Register a function that needs no attributes as the kernel of ``keys``.

    Example:
        >>> register_function(torch.square, 'Square')
        >>> build_kernel(Operation('sq', 'Square'), torch.device('cpu'))(torch.tensor([3.]))
        tensor([9.])
        >>> del OP_TABLE['Square']
    """
    def build(op: Operation, device: torch.device) -> Kernel:
        return function

    build.__name__ = f'build_{getattr(function, "__name__", "kernel")}'
    register_kernel(*keys, force=force)(build)


def build_kernel(op: Operation, device: torch.device) -> Kernel:
    """The kernel of ``op`` on ``device``.

    Raises:
        UnsupportedOperationError: no builder for the op type, or the builder refuses
            the operation's attributes; the message names the op type and the node.
    """
    KERNELS.import_from_location()
    builder = OP_TABLE.get(table_key(op))
    if builder is None:
        raise UnsupportedOperationError(op)
    return builder(op, device)
