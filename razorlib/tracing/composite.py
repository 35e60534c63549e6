"""Layers whose forward is several plain ops, traced as one op from input to output.

An RMSNorm computes ``weight * x * rsqrt(mean(x ** 2, -1) + eps)`` with plain ops: op by
op, the mean over the channels is a statistic that every channel feeds, so the channels
would freeze.  As a whole the module is a norm: each output channel follows its input
channel, and its kind's masked output recomputes the statistic over the kept channels,
as the slim module will.  A kind says so with ``traced_as_module``; the tracer then
hands the module's output node to the kind with the module's input, and skips the ops in
between.

A call is traced this way only when its ops are its own: every node between the input
and the output was made during the call, reads nothing but the input, the module's own
parameters and each other, and is read by nothing outside the call.  Otherwise (the
module reads another tensor, or leaks an intermediate) its ops are walked one by one.
"""
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

import torch.nn as nn

from ..layers import LayerKind
from .context import TraceContext
from .forward import ModuleCall

__all__ = ['WholeCall', 'inner_order', 'whole_calls']


@dataclass
class WholeCall:
    """A module call traced as one op.

    Args:
        call: what the forward recorded.
        module: the module.
        kind: its kind (``traced_as_module``).
        inner: the call's nodes other than its output.
    """
    call: ModuleCall
    module: nn.Module
    kind: LayerKind
    inner: set


def _inner_nodes(ctx: TraceContext, call: ModuleCall) -> Optional[set]:
    """The nodes between the call's input and output, or None if the call reads a tensor
    made outside it (other than its own parameters) or never reads its input."""
    source = call.input[0]
    inner, stack, reached = set(), [call.output], False
    while stack:
        node = stack.pop()
        for child, _ in node.next_functions:
            if child is None or child in inner:
                continue
            if child is source:
                reached = True
                continue
            variable = getattr(child, 'variable', None)
            if variable is not None:
                if all(owner != call.name for owner, _ in ctx.owners_of(variable)):
                    return None
                continue
            if child._sequence_nr() <= call.start:
                return None
            inner.add(child)
            stack.append(child)
    return inner if reached else None


def _closed(ctx: TraceContext, call: ModuleCall, inner: set) -> bool:
    """Nothing outside the call reads its intermediate nodes."""
    allowed = inner | {call.output}
    return all(consumer in allowed for node in inner for consumer in ctx.consumers.get(node, ()))


def whole_calls(ctx: TraceContext, calls: Sequence[ModuleCall]) -> Dict[Any, WholeCall]:
    """The recorded calls of ``traced_as_module`` kinds that can be traced as one op, by
    output node.

    Example:
        >>> import torch
        >>> from razorlib.tracing import trace
        >>> net = nn.Sequential(nn.Linear(4, 6), nn.RMSNorm(6), nn.Linear(6, 2))
        >>> graph = trace(net, torch.randn(3, 4))
        >>> sorted(u.name for u in graph.uses if u.role == 'norm')
        ['1']
    """
    found: Dict[Any, WholeCall] = {}
    for call in calls:
        module = ctx.modules.get(call.name)
        kind = ctx.kinds.kind_of(module) if module is not None else None
        if call.input is None or call.output is None or kind is None:
            continue
        inner = _inner_nodes(ctx, call)
        if inner is not None and _closed(ctx, call, inner):
            found[call.output] = WholeCall(call, module, kind, inner)
    return found


def inner_order(order: Sequence[Any], whole: WholeCall) -> List[Any]:
    """The call's inner nodes in ``order`` (walked one by one when its kind declines)."""
    return [node for node in order if node in whole.inner]
