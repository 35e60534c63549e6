"""PReLUKind: nn.PReLU, whose ``num_parameters`` slopes follow its input's channels."""
from typing import Dict, Sequence

import torch
import torch.nn as nn

from ..registry import LAYER_KINDS
from .base import Kept, LayerKind, SlicePlan, take
from .common import check_indices

__all__ = ['PReLUKind']


@LAYER_KINDS.register_module()
class PReLUKind(LayerKind):
    """``max(0, x) + a * min(0, x)`` with one slope ``a`` per channel of dim 1: like a
    norm, its one axis (``out``) follows its input's channels.  Slicing keeps the slopes
    of the kept channels *and* sets ``num_parameters``, so that the slim module's repr is
    right and its ``state_dict`` loads into ``nn.PReLU(num_parameters)`` (a bare
    parameter would be sliced alone).  With one shared slope (``num_parameters=1``) it
    has no channels: its op passes its input's channels through, and no subnet slices it.
    An activation costs no multiply-accumulates (OpenMMLab's convention).

    Example:
        >>> kind = PReLUKind()
        >>> plan = kind.plan_slice('act', nn.PReLU(4), {'out': [0, 2]})
        >>> plan.attrs, tuple(plan.params['weight'].shape)
        ({'num_parameters': 2}, (2,))
        >>> kind.params(nn.PReLU(4), {'out': 3}), kind.params(nn.PReLU(), {})
        (3, 1)
    """
    module_types = (nn.PReLU, )
    axes = ('out', )
    grad_fns = ('PreluKernelBackward0', )

    def widths(self, module: nn.Module) -> Dict[str, int]:
        return {'out': module.num_parameters}

    def trace(self, ctx, node, ins, name, module):
        """Bind the slopes to the input's dim-1 channels; None for a shared slope, whose
        op the plain ``prelu`` rule passes through (it keeps every dim's channels)."""
        if module.num_parameters == 1:
            return None
        slots = ctx.channel_input(ins[0], 1, module.num_parameters, name, node)
        ctx.use(name, 'norm', slots)
        return slots, 1

    def plan_slice(self, name: str, module: nn.Module,
                   kept: Dict[str, Sequence[int]]) -> SlicePlan:
        idx = check_indices(name, 'out', kept, module.num_parameters)
        return SlicePlan(params={'weight': take(module.weight, 0, idx)},
                         attrs={'num_parameters': len(idx)})

    def channel_weights(self, module: nn.Module, axis: str) -> torch.Tensor:
        """Each channel's slope."""
        return module.weight.detach().reshape(-1, 1)

    def params(self, module: nn.Module, kept: Kept) -> int:
        return self.full(module, kept)['out']
