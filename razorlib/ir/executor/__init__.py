"""Run a graph with torch: :class:`TorchExecutor` and the op table of its kernels.

Example:
    >>> from razorlib.ir.executor import OP_TABLE
    >>> all(op_type in OP_TABLE for op_type in ('Conv', 'Resize', 'LayerNormalization'))
    True
"""
from .executor import PostHook, PreHook, TorchExecutor
from .kernels import (KERNELS, OP_TABLE, Kernel, KernelBuilder, UnsupportedOperationError,
                      build_kernel, register_function, register_kernel, table_key)

__all__ = ['KERNELS', 'Kernel', 'KernelBuilder', 'OP_TABLE', 'PostHook', 'PreHook',
           'TorchExecutor', 'UnsupportedOperationError', 'build_kernel', 'register_function',
           'register_kernel', 'table_key']
