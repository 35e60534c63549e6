"""The op table: ONNX op type -> the builder of its torch kernel.

A *kernel builder* takes an :class:`~razorlib.ir.operation.Operation` and the executor's
device once, when the executor is built, reads the operation's attributes and constant
control inputs, and returns a *kernel*: a function of the operation's input tensors (None
for an absent optional input) that returns its output tensor, or a sequence of them.
Ops of the default domain are keyed by type (``'Conv'``), ops of other domains by
``'domain::Type'``.

Example:
    >>> import torch
    >>> from razorlib.ir import Operation
    >>> build_kernel(Operation('r', 'Relu'), torch.device('cpu'))(torch.tensor([-1., 2.]))
    tensor([0., 2.])
"""
from typing import Callable, Dict, Optional, Sequence, Union

import torch

from ..operation import Operation

__all__ = ['Kernel', 'KernelBuilder', 'OP_TABLE', 'UnsupportedOperationError', 'build_kernel',
           'register_function', 'register_kernel', 'table_key']

Kernel = Callable[..., Union[torch.Tensor, Sequence[torch.Tensor]]]
KernelBuilder = Callable[[Operation, torch.device], Kernel]

OP_TABLE: Dict[str, KernelBuilder] = {}
"""Op type (``'domain::Type'`` outside the default domain) -> kernel builder."""


class UnsupportedOperationError(NotImplementedError):
    """The executor has no kernel for an operation, or not for its attributes.

    Args:
        op: the operation.
        detail: what about it is unsupported; by default its op type.

    Example:
        >>> str(UnsupportedOperationError(Operation('n1', 'Foo')))
        "no torch kernel for op type 'Foo' (node 'n1'); register one in OP_TABLE"
    """

    def __init__(self, op: Operation, detail: Optional[str] = None) -> None:
        self.op_type, self.node = op.type, op.name
        domain = f' of domain {op.opset.domain!r}' if op.opset.domain else ''
        if detail is None:
            super().__init__(f'no torch kernel for op type {op.type!r}{domain} (node '
                             f'{op.name!r}); register one in OP_TABLE')
        else:
            super().__init__(f'{op.type} node {op.name!r}: {detail} is not supported')


def table_key(op: Operation) -> str:
    """The key of ``op`` in :data:`OP_TABLE`."""
    domain = op.opset.domain
    return op.type if domain in ('', 'ai.onnx') else f'{domain}::{op.type}'


def register_kernel(*keys: str) -> Callable[[KernelBuilder], KernelBuilder]:
    """Decorator: put a kernel builder in :data:`OP_TABLE` under each of ``keys``."""
    def register(builder: KernelBuilder) -> KernelBuilder:
        for key in keys:
            OP_TABLE[key] = builder
        return builder
    return register


def register_function(function: Kernel, *keys: str) -> None:
    """Register a function that needs no attributes as the kernel of ``keys``."""
    register_kernel(*keys)(lambda op, device: function)


def build_kernel(op: Operation, device: torch.device) -> Kernel:
    """The kernel of ``op`` on ``device``.

    Raises:
        UnsupportedOperationError: no builder for the op type, or the builder refuses
            the operation's attributes; the message names the op type and the node.
    """
    builder = OP_TABLE.get(table_key(op))
    if builder is None:
        raise UnsupportedOperationError(op)
    return builder(op, device)
