"""``in_mask`` / ``out_mask`` buffers and the masked forwards they drive.

A masked module multiplies its input by ``in_mask`` and its output by ``out_mask``.  Each
mask is a float buffer shaped to broadcast on the module's channel dim (``(C, 1, 1)`` for
an NCHW conv output, ``(C,)`` for a channels-last one), which gives exactly the outputs of
the sliced model; where a layer's kept outputs depend on its pruned channels (LayerNorm,
GroupNorm statistics) its :class:`~razorlib.layers.LayerKind` computes the masked output.
A bare parameter (layer scale, position embedding) gets a keep-mask per pruned dim
(:func:`~razorlib.layers.param_mask_name`), read by the counter only: its pruned entries
meet channels that are zero already.

Hooks are module-level functions (bound to the kind with ``functools.partial``) and the
masks are persistent buffers: a masked model deep-copies, pickles and round-trips its
``state_dict``.
"""
import inspect
import re
from functools import lru_cache, partial
from typing import Any, Dict, Optional, Tuple

import torch
import torch.nn as nn

from ..layers import IN_MASK, OUT_MASK, LayerKind, param_mask_name

__all__ = ['IN_MASK', 'OUT_MASK', 'add_masks', 'add_param_mask', 'layer_input', 'set_mask',
           'remove_masks']

_PARAM_MASK = re.compile(r'^(?P<attr>.+)_mask_dim\d+$')


@lru_cache(maxsize=None)
def _input_name(module_type: type) -> Optional[str]:
    """The name of the first argument of ``module_type.forward`` (``input`` for torch's
    layers): how a call that passes the input by keyword names it."""
    names = list(inspect.signature(module_type.forward).parameters)[1:]
    return names[0] if names else None


def layer_input(module: nn.Module, args: Tuple, kwargs: Dict[str, Any]) -> torch.Tensor:
    """The input a masked layer is called on, positional or by keyword
    (``self.fc(input=x)``)."""
    if args:
        return args[0]
    name = _input_name(type(module))
    if name in kwargs:
        return kwargs[name]
    raise TypeError(f'masked {type(module).__name__} was called without its input (no '
                    f'positional argument and no {name!r} keyword): its masks cannot apply')


def _mask_input(module: nn.Module, args: Tuple, kwargs: Dict[str, Any]) -> Tuple:
    masked = layer_input(module, args, kwargs) * module.in_mask
    if args:
        return (masked, ) + tuple(args[1:]), kwargs
    return args, {**kwargs, _input_name(type(module)): masked}


def _mask_output(kind: LayerKind, module: nn.Module, args: Tuple, kwargs: Dict[str, Any],
                 output: torch.Tensor) -> torch.Tensor:
    return kind.masked_output(module, layer_input(module, args, kwargs), output,
                              module.out_mask)


_HOOK_DICTS = ('_forward_pre_hooks', '_forward_hooks', '_forward_hooks_with_kwargs',
               '_forward_hooks_always_called', '_forward_pre_hooks_with_kwargs')


def _ones(channels: int, trailing: int, ref: torch.Tensor = None) -> torch.Tensor:
    kwargs = dict(device=ref.device, dtype=ref.dtype) if ref is not None else {}
    return torch.ones((channels, ) + (1, ) * trailing, **kwargs)


def add_masks(module: nn.Module, kind: LayerKind, out_dim: int) -> None:
    """Give ``module`` all-ones masks on the axes of its ``kind`` and the hooks that apply
    them.

    Args:
        module: a module with a layer kind.
        kind: its kind (widths, how the input mask broadcasts, the masked output).
        out_dim: the negative dim of the module's output that holds the channels.

    Example:
        >>> from razorlib.layers import kind_of
        >>> conv = nn.Conv2d(2, 3, 3)
        >>> add_masks(conv, kind_of(conv), -3)
        >>> conv.in_mask.shape, conv.out_mask.shape
        (torch.Size([2, 1, 1]), torch.Size([3, 1, 1]))
    """
    ref = next(module.parameters(), None)
    widths = kind.widths(module)
    if 'in' in widths:
        module.register_buffer(IN_MASK, _ones(widths['in'], kind.in_mask_trailing(module), ref))
        module.register_forward_pre_hook(_mask_input, with_kwargs=True)
    if 'out' in widths:
        module.register_buffer(OUT_MASK, _ones(widths['out'], -out_dim - 1, ref))
        module.register_forward_hook(partial(_mask_output, kind), with_kwargs=True)


def add_param_mask(owner: nn.Module, attr: str, dim: int) -> str:
    """Give ``owner`` an all-ones keep-mask of dim ``dim`` of its tensor ``attr``; returns
    the buffer's name."""
    tensor = getattr(owner, attr)
    name = param_mask_name(attr, dim)
    owner.register_buffer(name, torch.ones(tensor.shape[dim], device=tensor.device))
    return name


def set_mask(module: nn.Module, name: str, keep: torch.Tensor) -> None:
    """Write a boolean keep vector into a mask buffer in place."""
    buffer = module._buffers[name]
    buffer.copy_(keep.to(device=buffer.device, dtype=buffer.dtype).view(buffer.shape))


def _is_ours(hook) -> bool:
    return getattr(hook, 'func', hook) in (_mask_input, _mask_output)


def remove_masks(model: nn.Module) -> None:
    """Remove every mask buffer and masking hook: the model computes as before masking."""
    for module in model.modules():
        for name in [n for n in module._buffers
                     if n in (IN_MASK, OUT_MASK) or _param_mask_of(module, n)]:
            module._buffers.pop(name)
        hook_ids = [key for attr in ('_forward_pre_hooks', '_forward_hooks')
                    for key, fn in getattr(module, attr).items() if _is_ours(fn)]
        for attr in _HOOK_DICTS:
            hooks: Dict = getattr(module, attr, None) or {}
            for key in hook_ids:
                hooks.pop(key, None)


def _param_mask_of(module: nn.Module, buffer: str) -> bool:
    """Whether ``buffer`` is a keep-mask of one of ``module``'s tensors."""
    match = _PARAM_MASK.match(buffer)
    return match is not None and isinstance(getattr(module, match['attr'], None), torch.Tensor)
