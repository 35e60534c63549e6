"""ConvKind: nn.Conv1d/2d/3d and nn.ConvTranspose1d/2d/3d, plain, depthwise and grouped."""
from typing import Dict, Sequence, Tuple

import numpy as np
import torch
import torch.nn as nn

from ..registry import LAYER_KINDS
from .base import Kept, LayerKind, SlicePlan, take
from .common import bind_blocks, check_indices, per_group, prod

__all__ = ['ConvKind']


def _depthwise(conv: nn.modules.conv._ConvNd) -> bool:
    return conv.groups == conv.in_channels and conv.groups > 1


def _positions(module: nn.Module, x: torch.Tensor) -> int:
    """Spatial positions of ``x`` over its whole batch: a batch of one where the input is
    unbatched (``(C, H, W)`` for a Conv2d, which torch accepts)."""
    spatial = len(module.kernel_size)
    if x.dim() == spatial + 1:
        return prod(x.shape[1:])
    return x.shape[0] * prod(x.shape[2:])


@LAYER_KINDS.register_module()
class ConvKind(LayerKind):
    """Convolutions: output channel ``o`` of group ``g`` reads the input channels of ``g``.

    - groups == 1: the output channels are the layer's own, the input channels its
      producer's.
    - depthwise (groups == in_channels): output channel ``o`` reads input ``o // m``
      (``m = out / in``), so the output follows the input: the conv is bound to its
      producer and keeps the ``m`` outputs of each kept input.
    - group conv (1 < groups < in_channels): input and output channels are bound across
      the groups, so every group keeps the same positions and is cut equally.

    Example:
        >>> dw = nn.Conv2d(8, 16, 3, groups=8)
        >>> ConvKind().params(dw, {'in': 4, 'out': 8}) == 8 * 9 + 8
        True
    """
    module_types = (nn.modules.conv._ConvNd, )
    axes = ('in', 'out')
    grad_fns = ('ConvolutionBackward0', )

    def widths(self, module: nn.Module) -> Dict[str, int]:
        return {'in': module.in_channels, 'out': module.out_channels}

    def in_mask_trailing(self, module: nn.Module) -> int:
        return len(module.kernel_size)

    def trace(self, ctx, node, ins, name, module):
        if bool(node._saved_transposed) != module.transposed:
            # ``F.conv_transpose2d(z, conv.weight)`` (a tied decoder) or the converse: the
            # weight's two channel dims swap roles, so the op is no call of this layer
            # (left to the tracer, which freezes its channels)
            return None
        in_c, out_c, groups = module.in_channels, module.out_channels, module.groups
        in_slots = ctx.channel_input(ins[0], 1, in_c, name, node)
        if groups == 1:
            out_slots = ctx.layer_out(name, out_c)
        elif groups == in_c:
            out_slots = np.repeat(in_slots, out_c // in_c)
        else:
            reason = f'{name} is a group conv (groups={groups})'
            bind_blocks(ctx, in_slots, groups, reason)
            out_slots = ctx.layer_out(name, out_c)
            bind_blocks(ctx, out_slots, groups, reason)
        ctx.use(name, 'in', in_slots)
        ctx.use(name, 'out', out_slots)
        return out_slots, 1

    def plan_slice(self, name: str, module: nn.Module,
                   kept: Dict[str, Sequence[int]]) -> SlicePlan:
        in_c, out_c, groups = module.in_channels, module.out_channels, module.groups
        in_idx = check_indices(name, 'in', kept, in_c)
        out_idx = check_indices(name, 'out', kept, out_c)
        weight = module.weight
        rows, cols = (in_idx, out_idx) if module.transposed else (out_idx, in_idx)
        if groups == 1:
            new_groups = 1
            weight = take(take(weight, 0, rows), 1, cols)
        elif groups == in_c:
            mult = out_c // in_c
            expected = [i * mult + j for i in in_idx for j in range(mult)]
            if out_idx != expected:
                raise ValueError(f'{name} is a depthwise conv: it must keep the {mult} output '
                                 'channel(s) of every kept input channel and no others')
            new_groups = len(in_idx)
            weight = take(weight, 0, in_idx if module.transposed else out_idx)
        else:
            new_groups = groups
            in_local = per_group(name, 'input', in_idx, in_c, groups)
            out_local = per_group(name, 'output', out_idx, out_c, groups)
            weight = take(take(weight, 0, rows), 1,
                          out_local if module.transposed else in_local)
        plan = SlicePlan(params={'weight': weight},
                         attrs={'in_channels': len(in_idx), 'out_channels': len(out_idx),
                                'groups': new_groups})
        if module.bias is not None:
            plan.params['bias'] = take(module.bias, 0, out_idx)
        return plan

    def channel_weights(self, module: nn.Module, axis: str) -> torch.Tensor:
        """Filters for the layer's own axis (``out``; ``in`` when transposed), else the
        columns an input channel owns in the output channels of its own group."""
        weight = module.weight.detach()
        groups = module.groups
        per_pair = weight.flatten(2)  # (out, in/g, k) or, transposed, (in, out/g, k)
        own_axis = 'in' if module.transposed else 'out'
        if axis == own_axis:
            return per_pair.flatten(1)
        rows, per, k = per_pair.shape
        return (per_pair.reshape(groups, rows // groups, per, k).permute(0, 2, 1, 3)
                .reshape(groups * per, -1))

    def _per_output(self, module: nn.Module, kept_in: int) -> float:
        """Input channels one output channel reads, at kept widths."""
        return 1 if _depthwise(module) else kept_in / module.groups

    def params(self, module: nn.Module, kept: Kept) -> int:
        kept = self.full(module, kept)
        per_out = self._per_output(module, kept['in']) * prod(module.kernel_size)
        bias = kept['out'] if module.bias is not None else 0
        return int(round(kept['out'] * per_out)) + bias

    def flops(self, module: nn.Module, inputs: Tuple, output, kept: Kept) -> int:
        kept = self.full(module, kept)
        x, kernel = inputs[0], prod(module.kernel_size)
        if module.transposed:  # each input position scatters into (out / groups) * k outputs
            per_input = (kept['out'] / kept['in'] if _depthwise(module)
                         else kept['out'] / module.groups)
            return int(round(_positions(module, x) * kept['in'] * per_input * kernel))
        return int(round(_positions(module, output) * kept['out'] *
                         self._per_output(module, kept['in']) * kernel))
