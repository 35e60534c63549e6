"""``in_mask`` / ``out_mask`` buffers and the masked forwards they drive.

A masked module multiplies its input by ``in_mask`` and its output by ``out_mask``.  Each
mask is a float buffer shaped to broadcast on the module's channel dim (``(C, 1, 1)`` for
an NCHW conv output, ``(C,)`` for a channels-last one), which gives exactly the outputs of
the sliced model.  LayerNorm and GroupNorm recompute their statistics over the kept
channels only, so they match the sliced model too.  Hooks are module-level functions and
the masks are persistent buffers: a masked model deep-copies, pickles and round-trips its
``state_dict``.
"""
from typing import Dict, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

IN_MASK, OUT_MASK = 'in_mask', 'out_mask'


def _mask_input(module: nn.Module, args: Tuple) -> Tuple:
    return (args[0] * module.in_mask, ) + tuple(args[1:])


def _mask_output(module: nn.Module, args: Tuple, output: torch.Tensor) -> torch.Tensor:
    keep = module.out_mask
    if isinstance(module, (nn.LayerNorm, nn.GroupNorm)) and not bool(keep.all()):
        exact = _kept_norm(module, args[0], keep.flatten().bool(), -keep.dim())
        if exact is not None:
            return exact
    return output * keep


def _kept_norm(module: nn.Module, x: torch.Tensor, keep: torch.Tensor,
               dim: int) -> Optional[torch.Tensor]:
    """LayerNorm/GroupNorm output computed over the kept channels only (pruned ones 0).

    A LayerNorm normalises along its channel dim ``dim`` (the last one, or dim 1 for
    channels-first subclasses such as timm's ``LayerNorm2d``).
    """
    weight = module.weight[keep] if module.weight is not None else None
    bias = module.bias[keep] if module.bias is not None else None
    out = x.new_zeros(x.shape)
    if isinstance(module, nn.LayerNorm) and len(module.normalized_shape) == 1:
        kept = x.movedim(dim, -1)[..., keep]
        out.movedim(dim, -1)[..., keep] = F.layer_norm(kept, (kept.shape[-1], ), weight, bias,
                                                       module.eps)
        return out
    if type(module).forward is nn.GroupNorm.forward:
        groups = module.num_groups if module.num_groups < module.num_channels else int(keep.sum())
        out[:, keep] = F.group_norm(x[:, keep], groups, weight, bias, module.eps)
        return out
    return None


_HOOK_DICTS = ('_forward_pre_hooks', '_forward_hooks', '_forward_hooks_with_kwargs',
               '_forward_hooks_always_called', '_forward_pre_hooks_with_kwargs')


def _ones(channels: int, trailing: int, ref: Optional[torch.Tensor]) -> torch.Tensor:
    kwargs = dict(device=ref.device, dtype=ref.dtype) if ref is not None else {}
    return torch.ones((channels, ) + (1, ) * trailing, **kwargs)


def add_masks(module: nn.Module, in_channels: Optional[int], out_channels: int,
              out_dim: int) -> None:
    """Give ``module`` all-ones masks and the hooks that apply them.

    Args:
        in_channels: input channels (conv/linear), or None for norms and embeddings.
        out_channels: output channels.
        out_dim: the negative dim of the module's output that holds the channels.
    """
    ref = next(module.parameters(), None)
    if in_channels is not None:
        kernel = getattr(module, 'kernel_size', ())
        module.register_buffer(IN_MASK, _ones(in_channels, len(kernel), ref))
        module.register_forward_pre_hook(_mask_input)
    module.register_buffer(OUT_MASK, _ones(out_channels, -out_dim - 1, ref))
    module.register_forward_hook(_mask_output)


def set_mask(module: nn.Module, name: str, keep: torch.Tensor) -> None:
    """Write a boolean keep vector into a mask buffer in place."""
    buffer = module._buffers[name]
    buffer.copy_(keep.to(device=buffer.device, dtype=buffer.dtype).view(buffer.shape))


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
