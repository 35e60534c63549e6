"""``in_mask`` / ``out_mask`` buffers and the masked forwards they drive.

A masked module multiplies its input by ``in_mask`` and its output by ``out_mask``
(1-D float buffers, broadcast on the module's channel dim), which gives exactly the
outputs of the sliced model.  LayerNorm and GroupNorm recompute their statistics over the
kept channels only, so that they match the sliced model too.  Hooks are module-level
functions and the masks are persistent buffers: a masked model deep-copies, pickles and
round-trips its ``state_dict``.
"""
from typing import Dict, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

IN_MASK, OUT_MASK = 'in_mask', 'out_mask'
_CHANNELS_LAST = (nn.Linear, nn.LayerNorm, nn.Embedding)


def channel_dim(module: nn.Module) -> int:
    """Where a module's activations keep their channels: 1, or -1 for channels-last ones."""
    return -1 if isinstance(module, _CHANNELS_LAST) else 1


def _broadcast(mask: torch.Tensor, x: torch.Tensor, dim: int) -> torch.Tensor:
    if dim == -1 or x.dim() == 2:
        return mask
    return mask.view(1, -1, *([1] * (x.dim() - 2)))


def _mask_input(module: nn.Module, args: Tuple) -> Tuple:
    x = args[0]
    return (x * _broadcast(module.in_mask, x, channel_dim(module)), ) + tuple(args[1:])


def _mask_output(module: nn.Module, args: Tuple, output: torch.Tensor) -> torch.Tensor:
    keep = module.out_mask
    if isinstance(module, (nn.LayerNorm, nn.GroupNorm)) and not bool(keep.all()):
        exact = _kept_norm(module, args[0], keep.bool())
        if exact is not None:
            return exact
    return output * _broadcast(keep, output, channel_dim(module))


def _kept_norm(module: nn.Module, x: torch.Tensor, keep: torch.Tensor) -> Optional[torch.Tensor]:
    """LayerNorm/GroupNorm output computed over the kept channels only (pruned ones 0)."""
    weight = module.weight[keep] if module.weight is not None else None
    bias = module.bias[keep] if module.bias is not None else None
    out = x.new_zeros(x.shape)
    if type(module).forward is nn.LayerNorm.forward:
        out[..., keep] = F.layer_norm(x[..., keep], (int(keep.sum()), ), weight, bias, module.eps)
        return out
    if type(module).forward is nn.GroupNorm.forward:
        groups = module.num_groups if module.num_groups < module.num_channels else int(keep.sum())
        out[:, keep] = F.group_norm(x[:, keep], groups, weight, bias, module.eps)
        return out
    return None


_HOOK_DICTS = ('_forward_pre_hooks', '_forward_hooks', '_forward_hooks_with_kwargs',
               '_forward_hooks_always_called', '_forward_pre_hooks_with_kwargs')


def has_masks(module: nn.Module) -> bool:
    return OUT_MASK in module._buffers or IN_MASK in module._buffers


def add_masks(module: nn.Module, in_channels: Optional[int], out_channels: int) -> None:
    """Give ``module`` all-ones masks and the hooks that apply them."""
    ref = next(module.parameters(), None)
    kwargs = dict(device=ref.device, dtype=ref.dtype) if ref is not None else {}
    if in_channels is not None:
        module.register_buffer(IN_MASK, torch.ones(in_channels, **kwargs))
        module.register_forward_pre_hook(_mask_input)
    module.register_buffer(OUT_MASK, torch.ones(out_channels, **kwargs))
    module.register_forward_hook(_mask_output)


def set_mask(module: nn.Module, name: str, keep: torch.Tensor) -> None:
    """Write a boolean keep vector into a mask buffer in place."""
    buffer = module._buffers[name]
    buffer.copy_(keep.to(device=buffer.device, dtype=buffer.dtype))


def remove_masks(model: nn.Module) -> None:
    """Remove every mask buffer and masking hook: the model computes as before masking."""
    ours = (_mask_input, _mask_output)
    for module in model.modules():
        for name in (IN_MASK, OUT_MASK):
            module._buffers.pop(name, None)
        hook_ids = [key for attr in ('_forward_pre_hooks', '_forward_hooks')
                    for key, fn in getattr(module, attr).items() if fn in ours]
        for attr in _HOOK_DICTS:
            hooks: Dict = getattr(module, attr, None) or {}
            for key in hook_ids:
                hooks.pop(key, None)
