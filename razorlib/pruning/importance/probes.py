"""Probes on the tensors a group's channels flow through: what data-driven criteria see.

A *point* is one use of a group read at run time: a consumer's input (role ``in``) or a
producer's or norm's output (``out``, ``norm``), with the dim that holds the channels.
:func:`observe` hands each point's tensor to a callback on every call; :func:`gate_grads`
multiplies each point by a gate of ones (one per sample and channel) and returns the
gradient of the loss with respect to those gates: per sample, ``sum(a * dL/da)`` over
the positions of each channel, the first-order change of the loss if the channel were
zeroed there.  No parameter's ``.grad`` is touched.
"""
from contextlib import contextmanager
from typing import Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence

import torch
import torch.nn as nn

from ...tracing.context import ChannelUse
from ...tracing.forward import call_model
from .base import ImportanceContext

__all__ = ['Point', 'points_of', 'observe', 'gate_grads', 'channel_sums']


class Point(NamedTuple):
    """One use read at run time: ``module``'s input or output, channels on ``dim``."""
    use: ChannelUse
    module: nn.Module
    on_input: bool
    dim: int


def points_of(ctx: ImportanceContext, uses: Sequence[ChannelUse]) -> List[Point]:
    """The points of ``uses`` (bare parameters have none)."""
    points = []
    for use in uses:
        if use.role == 'param':
            continue
        module = ctx.modules[use.name]
        if use.role == 'in':
            dim = -(ctx.kinds.kind_of(module).in_mask_trailing(module) + 1)
        else:
            dim = ctx.out_dims.get(use.name, 1)
        points.append(Point(use, module, use.role == 'in', dim))
    return points


def _fits(tensor: object, point: Point) -> bool:
    return (isinstance(tensor, torch.Tensor) and tensor.dim() >= max(-point.dim, point.dim + 1)
            and tensor.shape[point.dim] == len(point.use.slots))


@contextmanager
def _hooked(points: Sequence[Point],
            on_tensor: Callable[[int, torch.Tensor], Optional[torch.Tensor]]) -> Iterator[None]:
    """Call ``on_tensor(point index, tensor)`` on each point while the block runs; a
    tensor it returns replaces the point's."""
    handles = []
    for i, point in enumerate(points):
        if point.on_input:
            def pre(module, args, i=i, point=point):
                if args and _fits(args[0], point):
                    new = on_tensor(i, args[0])
                    return None if new is None else (new, ) + tuple(args[1:])
                return None
            handles.append(point.module.register_forward_pre_hook(pre))
        else:
            def post(module, args, output, i=i, point=point):
                return on_tensor(i, output) if _fits(output, point) else None
            handles.append(point.module.register_forward_hook(post))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


@contextmanager
def _evaluating(model: nn.Module) -> Iterator[None]:
    training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(training)


def observe(ctx: ImportanceContext, points: Sequence[Point], criterion: str,
            on_tensor: Callable[[int, torch.Tensor], None]) -> None:
    """Run the model (eval mode, no grad) on every batch of ``ctx.data``, handing each
    point's tensor to ``on_tensor(point index, tensor)``."""
    with _evaluating(ctx.model), torch.no_grad(), _hooked(points, on_tensor):
        for inputs, _ in ctx.batches(criterion):
            call_model(ctx.model, inputs)


def per_sample(tensor: torch.Tensor, dim: int) -> torch.Tensor:
    """``(samples, channels)``: ``tensor`` summed over every dim but the first and
    ``dim``; one row when ``dim`` is the first."""
    moved = tensor.movedim(dim, -1)
    channels = moved.shape[-1]
    if tensor.dim() < 2 or dim % tensor.dim() == 0:
        return moved.reshape(1, -1, channels).sum(1)
    return moved.reshape(moved.shape[0], -1, channels).sum(1)


def channel_sums(tensor: torch.Tensor, dim: int) -> torch.Tensor:
    """``tensor`` summed over every dim but ``dim``."""
    return tensor.movedim(dim, -1).reshape(-1, tensor.shape[dim]).sum(0)


def gate_grads(ctx: ImportanceContext, points: Sequence[Point],
               criterion: str) -> Iterator[Dict[int, torch.Tensor]]:
    """Per batch of ``ctx.data``: point index -> ``(samples, channels)`` gradients of the
    loss with respect to gates of ones on the point (summed over the point's calls).

    The model runs in eval mode; gradients flow to the gates only.
    """
    for inputs, targets in ctx.batches(criterion):
        gates: Dict[int, List[torch.Tensor]] = {}

        def gate(i: int, tensor: torch.Tensor) -> torch.Tensor:
            dim = points[i].dim % tensor.dim()
            shape = [1] * tensor.dim()
            shape[dim] = tensor.shape[dim]
            if dim != 0:
                shape[0] = tensor.shape[0]
            ones = torch.ones(shape, dtype=tensor.dtype, device=tensor.device,
                              requires_grad=True)
            gates.setdefault(i, []).append(ones)
            return tensor * ones

        with _evaluating(ctx.model), torch.enable_grad(), _hooked(points, gate):
            loss = ctx.loss(call_model(ctx.model, inputs), targets)
        flat = [g for calls in gates.values() for g in calls]
        if not flat:
            raise RuntimeError(f'importance {criterion!r}: no layer of a prunable group ran '
                               'on the data batch; do the batches fit the model?')
        grads = iter(torch.autograd.grad(loss, flat, allow_unused=True))
        batch: Dict[int, torch.Tensor] = {}
        for i, calls in gates.items():
            for ones in calls:
                grad = next(grads)
                grad = torch.zeros_like(ones) if grad is None else grad
                rows = per_sample(grad, points[i].dim % grad.dim())
                previous = batch.get(i)
                if previous is not None and previous.shape != rows.shape:
                    previous, rows = previous.sum(0, keepdim=True), rows.sum(0, keepdim=True)
                batch[i] = rows if previous is None else previous + rows
        yield {i: rows.detach() for i, rows in batch.items()}
