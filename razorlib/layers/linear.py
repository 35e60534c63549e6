"""LinearKind: nn.Linear (and subclasses such as MultiheadAttention's out_proj)."""
from typing import Dict, Sequence, Tuple

import torch
import torch.nn as nn

from ..registry import LAYER_KINDS
from .base import Kept, LayerKind, SlicePlan, take
from .common import check_indices

__all__ = ['LinearKind']

#: grad_fn name -> the input of the node that carries the activation.
_ACTIVATION_INPUT = {'AddmmBackward0': 1, 'MmBackward0': 0}
#: grad_fn name -> the input of the node that carries the (transposed) weight.
_WEIGHT_INPUT = {'AddmmBackward0': 2, 'MmBackward0': 1}


@LAYER_KINDS.register_module()
class LinearKind(LayerKind):
    """``y = x W^T + b``: input channels are columns of ``W``, output channels its rows.

    On 2-D inputs the op is ``addmm`` (with bias) or ``mm``; on N-D inputs torch wraps
    it in views that merge and split the token dims, which the reshape rule follows.

    Example:
        >>> LinearKind().flops(nn.Linear(8, 4), (torch.ones(5, 8), ), torch.ones(5, 4),
        ...                    {'in': 2, 'out': 3})
        30
    """
    module_types = (nn.Linear, )
    axes = ('in', 'out')
    grad_fns = tuple(_ACTIVATION_INPUT)

    def widths(self, module: nn.Module) -> Dict[str, int]:
        return {'in': module.in_features, 'out': module.out_features}

    def trace(self, ctx, node, ins, name, module):
        if ins[_WEIGHT_INPUT[node.name()]].param is not None:
            # the weight itself, not its transpose: no ``F.linear`` but code multiplying
            # by it (``z @ enc.weight``, a tied decoder), whose output holds the weight's
            # columns (the layer's inputs), not its outputs.  Left to the product's rule
            return None
        x = ins[_ACTIVATION_INPUT[node.name()]]
        widths = self.widths(module)
        in_slots = ctx.channel_input(x, 1, widths['in'], name, node)
        out_slots = ctx.layer_out(name, widths['out'])
        ctx.use(name, 'in', in_slots)
        ctx.use(name, 'out', out_slots)
        return out_slots, 1

    def plan_slice(self, name: str, module: nn.Module,
                   kept: Dict[str, Sequence[int]]) -> SlicePlan:
        in_idx = check_indices(name, 'in', kept, module.in_features)
        out_idx = check_indices(name, 'out', kept, module.out_features)
        plan = SlicePlan(params={'weight': take(take(module.weight, 0, out_idx), 1, in_idx)},
                         attrs={'in_features': len(in_idx), 'out_features': len(out_idx)})
        if module.bias is not None:
            plan.params['bias'] = take(module.bias, 0, out_idx)
        return plan

    def channel_weights(self, module: nn.Module, axis: str) -> torch.Tensor:
        weight = module.weight.detach()
        return weight if axis == 'out' else weight.t()

    def params(self, module: nn.Module, kept: Kept) -> int:
        kept = self.full(module, kept)
        return kept['in'] * kept['out'] + (kept['out'] if module.bias is not None else 0)

    def flops(self, module: nn.Module, inputs: Tuple, output, kept: Kept) -> int:
        kept = self.full(module, kept)
        return output.numel() // module.out_features * kept['in'] * kept['out']
