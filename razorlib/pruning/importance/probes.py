"""Probes on the tensors a group's channels flow through: what data-driven criteria see.

A *point* is one use of a group read at run time: a consumer's input (role ``in``) or a
producer's or norm's output (``out``, ``norm``), with the dim that holds the channels.
:func:`observe` hands each point's tensor to a callback on every call; :func:`gate_grads`
multiplies each point by a gate of ones (one per sample and channel) and returns the
gradient of the loss with respect to those gates: per sample, ``sum(a * dL/da)`` over
the positions of each channel, the first-order change of the loss if the channel were
zeroed there.  No parameter's ``.grad`` is touched.  With ``layerwise=True`` the
repeated blocks run under activation checkpointing (:func:`checkpointed`), so the
backward holds the blocks' boundary tensors and one block's activations at a time.
"""
import functools
from contextlib import contextmanager, nullcontext
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

from ...tracing.context import ChannelUse
from ...tracing.forward import call_on_batch
from ...utils.modes import evaluating
from .base import ImportanceContext

__all__ = ['Point', 'points_of', 'observe', 'gate_grads', 'channel_sums', 'repeated_blocks',
           'checkpointed']


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


def observe(ctx: ImportanceContext, points: Sequence[Point], criterion: str,
            on_tensor: Callable[[int, torch.Tensor], None]) -> None:
    """Run the model (eval mode, no grad) on every batch of ``ctx.data``, handing each
    point's tensor to ``on_tensor(point index, tensor)``."""
    with evaluating(ctx.model), torch.no_grad(), _hooked(points, on_tensor):
        for index, (inputs, _) in enumerate(ctx.batches(criterion)):
            call_on_batch(ctx.model, inputs, f'importance {criterion!r}', index)


def per_sample(tensor: torch.Tensor, dim: int) -> torch.Tensor:
    """``(samples, channels)``: ``tensor`` summed over every dim but the first and
    ``dim``; one row when ``dim`` is the first.  An empty tensor (a routed expert no
    token of the batch reached: :class:`razorlib.nn.SplitExperts`) gives zeros.

    Example:
        >>> per_sample(torch.ones(0, 3, 4), 2).shape, per_sample(torch.ones(2, 3, 4), 2).tolist()
        (torch.Size([0, 4]), [[3.0, 3.0, 3.0, 3.0], [3.0, 3.0, 3.0, 3.0]])
    """
    moved = tensor.movedim(dim, -1)
    channels = moved.shape[-1]
    rows = 1 if tensor.dim() < 2 or dim % tensor.dim() == 0 else moved.shape[0]
    if moved.numel() == 0:
        return moved.new_zeros(rows, channels)
    return moved.reshape(rows, -1, channels).sum(1)


def channel_sums(tensor: torch.Tensor, dim: int) -> torch.Tensor:
    """``tensor`` summed over every dim but ``dim``."""
    return tensor.movedim(dim, -1).reshape(-1, tensor.shape[dim]).sum(0)


def repeated_blocks(model: nn.Module) -> List[nn.Module]:
    """The children of every ``nn.ModuleList`` in ``model`` (decoder layers, encoder
    layers, GPT-2's ``h``), outermost only: a block inside one of them is recomputed
    with it.  A child that is itself a ``ModuleList``/``ModuleDict`` is never called, so
    its own children stand in for it.

    Example:
        >>> blocks = nn.ModuleList(nn.Sequential(nn.Linear(2, 2), nn.ModuleList([nn.ReLU()]))
        ...                        for _ in range(2))
        >>> [type(b).__name__ for b in repeated_blocks(nn.Sequential(nn.Linear(2, 2), blocks))]
        ['Sequential', 'Sequential']
    """
    found: Dict[int, nn.Module] = {}
    inside: List[str] = []
    for name, module in model.named_modules():
        if not isinstance(module, nn.ModuleList) or any(name.startswith(p) for p in inside):
            continue
        for child_name, child in module.named_children():
            if not isinstance(child, (nn.ModuleList, nn.ModuleDict)) and id(child) not in found:
                found[id(child)] = child
                inside.append(f'{name}.{child_name}.' if name else f'{child_name}.')
    return list(found.values())


def _checkpointing(forward: Callable[..., Any]) -> Callable[..., Any]:
    """``forward`` run under checkpoint, with its signature (for code that inspects it)."""
    @functools.wraps(forward)
    def run(*args: Any, **kwargs: Any) -> Any:
        return checkpoint(forward, *args, use_reentrant=False, **kwargs)
    return run


@contextmanager
def checkpointed(model: nn.Module) -> Iterator[None]:
    """Run each of :func:`repeated_blocks` under non-reentrant activation checkpointing
    for a while: the autograd graph keeps a block's inputs (the residual stream at block
    boundaries) and the backward recomputes one block's activations at a time, at the
    cost of a second forward of each block.  Keyword arguments (attention masks, rotary
    ``position_embeddings``) go through to the block.

    Raises:
        ValueError: ``model`` has no ``nn.ModuleList``, so no repeated blocks to checkpoint.

    Example:
        >>> with checkpointed(nn.Linear(2, 2)):
        ...     pass
        Traceback (most recent call last):
        ...
        ValueError: layerwise=True: Linear has no nn.ModuleList, so no repeated blocks to ...
    """
    blocks = repeated_blocks(model)
    if not blocks:
        raise ValueError(f'layerwise=True: {type(model).__name__} has no nn.ModuleList, so no '
                         'repeated blocks to checkpoint; use layerwise=False')
    own = [block.__dict__.get('forward') for block in blocks]  # an instance's own forward
    for block in blocks:
        block.forward = _checkpointing(block.forward)
    try:
        yield
    finally:
        for block, forward in zip(blocks, own):
            if forward is None:
                del block.forward
            else:
                block.forward = forward


def gate_grads(ctx: ImportanceContext, points: Sequence[Point], criterion: str,
               layerwise: bool = False) -> Iterator[Dict[int, torch.Tensor]]:
    """Per batch of ``ctx.data``: point index -> ``(samples, channels)`` gradients of the
    loss with respect to gates of ones on the point (summed over the point's calls).

    The model runs in eval mode; gradients flow to the gates only.  ``layerwise`` runs
    the repeated blocks under :func:`checkpointed`: the backward recomputes a block and
    its gate hooks fire again, multiplying by fresh ones (so that the recomputed tensors
    match the forward's) but recording no gate, so the gradients are those of the gates
    of the forward, in order.
    """
    if not points:  # else each batch is refused as if the model could not run it
        raise ValueError(f'importance {criterion!r}: none of the uses it reads is a layer\'s '
                         "input or output (bare parameters have no tensor to gate); read "
                         "roles 'in', 'out' or 'norm'")
    for index, (inputs, targets) in enumerate(ctx.batches(criterion)):
        yield _batch_gate_grads(ctx, points, criterion, inputs, targets, layerwise, index)


def _batch_gate_grads(ctx: ImportanceContext, points: Sequence[Point], criterion: str,
                      inputs: Any, targets: Any, layerwise: bool,
                      index: int) -> Dict[int, torch.Tensor]:
    """One batch of :func:`gate_grads`."""
    gates: Dict[int, List[torch.Tensor]] = {}
    forward = True

    def gate(i: int, tensor: torch.Tensor) -> torch.Tensor:
        dim = points[i].dim % tensor.dim()
        shape = [1] * tensor.dim()
        shape[dim] = tensor.shape[dim]
        if dim != 0:
            shape[0] = tensor.shape[0]
        ones = torch.ones(shape, dtype=tensor.dtype, device=tensor.device, requires_grad=True)
        if forward:  # not a block recomputed by the backward
            gates.setdefault(i, []).append(ones)
        return tensor * ones

    blocks = checkpointed(ctx.model) if layerwise else nullcontext()
    # the backward runs in here too: a checkpointed block recomputes with the hooks and mode
    with evaluating(ctx.model), torch.enable_grad(), _hooked(points, gate), blocks:
        loss = ctx.loss(call_on_batch(ctx.model, inputs, f'importance {criterion!r}', index),
                        targets, criterion, index)
        forward = False
        flat = [g for calls in gates.values() for g in calls]
        if not flat:
            raise RuntimeError(f'importance {criterion!r}: no layer of a prunable group ran '
                               'on the data batch; do the batches fit the model?')
        if not loss.requires_grad:  # else autograd's bare 'element 0 of tensors does not ...'
            raise ValueError(f'importance {criterion!r}: the loss on batch {index} carries no '
                             'gradient back to the model: loss_fn or the model detaches it '
                             '(.detach(), .item(), torch.no_grad(), a new tensor built from a '
                             'number); the criterion differentiates the loss')
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
    return {i: rows.detach() for i, rows in batch.items()}
