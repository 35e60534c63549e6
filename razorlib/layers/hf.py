"""Kinds for Hugging Face transformers' own layers, named by qualified name so that
razorlib never imports transformers: ``Conv1D`` (GPT-2, GPT, CTRL).

The other layers HF models are built of are covered elsewhere: ``nn.Linear``,
``nn.Embedding`` (tied input/output embeddings are one parameter that the tracer knows
by both owners), ``nn.LayerNorm``, and the ``*RMSNorm`` classes (``RMSNormKind`` in
``norm.py``, claimed by name).
"""
from typing import Dict, Sequence, Tuple

import torch
import torch.nn as nn

from ..registry import LAYER_KINDS
from .base import Kept, LayerKind, SlicePlan, take
from .common import check_indices

__all__ = ['HFConv1DKind']


@LAYER_KINDS.register_module()
class HFConv1DKind(LayerKind):
    """transformers' ``Conv1D``: a linear layer whose weight is stored ``(in, out)``.

    Its forward is ``torch.addmm(bias, x.view(-1, nx), weight)``: the activation is
    input 1 of the ``addmm`` node and the weight input 2, not transposed (the tracer
    finds it there as it finds an ``nn.Linear`` weight behind its transpose).  Input
    channels are the weight's rows, output channels its columns; ``nx``/``nf`` hold
    the widths (``nf`` also sizes the output view).

    Example:
        >>> from transformers.pytorch_utils import Conv1D
        >>> conv = Conv1D(8, 4)  # nf=8 outputs, nx=4 inputs
        >>> kind = HFConv1DKind()
        >>> kind.widths(conv)
        {'in': 4, 'out': 8}
        >>> plan = kind.plan_slice('c_fc', conv, {'out': [0, 2, 5]})
        >>> tuple(plan.params['weight'].shape), plan.attrs
        ((4, 3), {'nx': 4, 'nf': 3})
    """
    module_types = ('transformers.pytorch_utils.Conv1D', )
    axes = ('in', 'out')
    grad_fns = ('AddmmBackward0', )

    def widths(self, module: nn.Module) -> Dict[str, int]:
        nx, nf = module.weight.shape
        return {'in': nx, 'out': nf}

    def trace(self, ctx, node, ins, name, module):
        widths = self.widths(module)
        in_slots = ctx.channel_input(ins[1], 1, widths['in'], name, node)
        out_slots = ctx.layer_out(name, widths['out'])
        ctx.use(name, 'in', in_slots)
        ctx.use(name, 'out', out_slots)
        return out_slots, 1

    def plan_slice(self, name: str, module: nn.Module,
                   kept: Dict[str, Sequence[int]]) -> SlicePlan:
        widths = self.widths(module)
        in_idx = check_indices(name, 'in', kept, widths['in'])
        out_idx = check_indices(name, 'out', kept, widths['out'])
        plan = SlicePlan(params={'weight': take(take(module.weight, 0, in_idx), 1, out_idx)},
                         attrs={'nx': len(in_idx), 'nf': len(out_idx)})
        if module.bias is not None:
            plan.params['bias'] = take(module.bias, 0, out_idx)
        return plan

    def channel_weights(self, module: nn.Module, axis: str) -> torch.Tensor:
        weight = module.weight.detach()
        return weight.t() if axis == 'out' else weight

    def params(self, module: nn.Module, kept: Kept) -> int:
        kept = self.full(module, kept)
        return kept['in'] * kept['out'] + (kept['out'] if module.bias is not None else 0)

    def flops(self, module: nn.Module, inputs: Tuple, output, kept: Kept) -> int:
        kept = self.full(module, kept)
        return output.numel() // self.widths(module)['out'] * kept['in'] * kept['out']
