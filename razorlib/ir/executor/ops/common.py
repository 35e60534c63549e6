"""Helpers the kernel builders share: constant inputs, attribute-or-input readers, padding.

A *reader* is resolved once, at build time, and called by the kernel with its input
tensors: it returns a value fixed by an attribute or a constant input without touching
the tensors, reads a dynamic input, or returns None for an absent one.
"""
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Callable, FrozenSet, Iterable, Iterator, List, Optional, Sequence, Tuple

import torch

from ...operation import Operation
from ...variable import EMPTY_NAME, Variable

__all__ = ['Reader', 'SlidingWindow', 'constant_input', 'fed_variables', 'input_variable',
           'int_list', 'reader', 'same_pads', 'split_pads', 'torch_pads']

Reader = Callable[[Sequence[Optional[torch.Tensor]]], Any]

_FED: ContextVar[FrozenSet[str]] = ContextVar('fed_variables', default=frozenset())


def input_variable(op: Operation, index: int) -> Optional[Variable]:
    """Input ``index`` of ``op``; None when it is absent (missing or the empty name)."""
    if index < len(op.inputs) and op.inputs[index].name != EMPTY_NAME:
        return op.inputs[index]
    return None


@contextmanager
def fed_variables(names: Iterable[str]) -> Iterator[None]:
    """Kernels built inside read the variables named ``names`` when they run, as fed.

    A graph input may hold a value too (an ONNX initializer listed among the graph inputs
    is a default that a feed overrides), so a kernel must not bake that value in.
    :class:`~razorlib.ir.executor.TorchExecutor` builds its kernels inside, with the graph
    inputs' names.
    """
    token = _FED.set(frozenset(names))
    try:
        yield
    finally:
        _FED.reset(token)


def constant_input(op: Operation, index: int) -> Optional[torch.Tensor]:
    """The value of input ``index`` when it is a constant: a value that nothing produces
    and that no feed replaces (see :func:`fed_variables`)."""
    var = input_variable(op, index)
    if (var is not None and var.value is not None and var.source_op is None
            and var.name not in _FED.get()):
        return var.value
    return None


def int_list(tensor: torch.Tensor) -> List[int]:
    """The entries of an integer tensor (any rank) as a list of ints."""
    return [int(item) for item in tensor.reshape(-1).tolist()]


def reader(op: Operation, index: int, convert: Callable[[torch.Tensor], Any] = int_list,
           attribute: Optional[str] = None,
           from_attribute: Callable[[Any], Any] = lambda value: value) -> Reader:
    """Read an operand given by an attribute (older opsets) or by input ``index``.

    Args:
        op: the operation.
        index: the input that carries the operand.
        convert: turns the input tensor into the operand (default: a list of ints).
        attribute: the attribute that carries it instead, if any.
        from_attribute: turns the attribute value into the operand.

    Returns:
        A function of the kernel's inputs; constant operands are converted once.
    """
    if attribute is not None and attribute in op.attributes:
        value = from_attribute(op.attributes[attribute])
        return lambda inputs: value
    if input_variable(op, index) is None:
        return lambda inputs: None
    constant = constant_input(op, index)
    if constant is not None:
        value = convert(constant)
        return lambda inputs: value
    return lambda inputs: convert(inputs[index])


def split_pads(pads: Optional[Sequence[int]], rank: int) -> Tuple[List[int], List[int]]:
    """ONNX ``[x1_begin, x2_begin, ..., x1_end, x2_end, ...]`` -> (begins, ends)."""
    pads = list(pads) if pads else [0] * (2 * rank)
    return pads[:rank], pads[rank:]


def torch_pads(begins: Sequence[int], ends: Sequence[int]) -> List[int]:
    """(begins, ends) of the trailing dims -> ``F.pad``'s order, last dim first."""
    return [pad for begin, end in zip(reversed(begins), reversed(ends)) for pad in (begin, end)]


def same_pads(sizes: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
              dilations: Sequence[int], upper: bool) -> Tuple[List[int], List[int]]:
    """``auto_pad=SAME_UPPER/SAME_LOWER``: pads that give ``ceil(size / stride)`` outputs."""
    begins, ends = [], []
    for size, k, stride, dilation in zip(sizes, kernel, strides, dilations):
        total = max(0, (-(-size // stride) - 1) * stride + (k - 1) * dilation + 1 - size)
        small, large = total // 2, total - total // 2
        begins.append(small if upper else large)
        ends.append(large if upper else small)
    return begins, ends


class SlidingWindow:
    """The sliding-window attributes of a Conv, ConvTranspose or pooling operation.

    Args:
        op: the operation.
        rank: its number of spatial dims.
    """

    def __init__(self, op: Operation, rank: int) -> None:
        attributes = op.attributes
        self.rank = rank
        self.kernel = list(attributes.get('kernel_shape', []))
        self.strides = list(attributes.get('strides', [1] * rank))
        self.dilations = list(attributes.get('dilations', [1] * rank))
        self.auto_pad = attributes.get('auto_pad', 'NOTSET')
        if self.auto_pad == 'VALID':
            self.begins, self.ends = [0] * rank, [0] * rank
        else:
            self.begins, self.ends = split_pads(attributes.get('pads'), rank)

    @property
    def same(self) -> bool:
        """Whether ``auto_pad`` asks for SAME padding, which depends on the input size."""
        return self.auto_pad in ('SAME_UPPER', 'SAME_LOWER')

    def pads(self, sizes: Sequence[int], kernel: Sequence[int]) -> Tuple[List[int], List[int]]:
        """(begins, ends) for an input of spatial ``sizes``."""
        if self.same:
            return same_pads(sizes, kernel, self.strides, self.dilations,
                             self.auto_pad == 'SAME_UPPER')
        return self.begins, self.ends
