"""Kinds for Hugging Face transformers' own layers, named by qualified name so that
razorlib never imports transformers: ``Conv1D`` (GPT-2, GPT, CTRL) and the routers of
mixture-of-experts models (``*Router`` classes that hold their own weight).

The other layers HF models are built of are covered elsewhere: ``nn.Linear``,
``nn.Embedding`` (tied input/output embeddings are one parameter that the tracer knows
by both owners), ``nn.LayerNorm``, and the ``*RMSNorm`` classes (``RMSNormKind`` in
``norm.py``, claimed by name).
"""
import re
from typing import Dict, Optional, Sequence, Tuple

import torch
import torch.nn as nn

from ..registry import LAYER_KINDS
from .base import Kept, LayerKind, SlicePlan, take
from .common import check_indices
from .linear import LinearKind
from .parameter import is_mask_name

__all__ = ['HFConv1DKind', 'RouterKind']


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
        if ins[2].param is None:
            # the weight through a transpose: no call of Conv1D but code running its
            # weight as nn.Linear's (``F.linear(z, c.weight)``), whose output holds the
            # weight's rows (the layer's inputs).  Left to the tracer, which freezes them
            return None
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


@LAYER_KINDS.register_module()
class RouterKind(LinearKind):
    """The router of a transformers mixture-of-experts layer (``MixtralTopKRouter``,
    ``Qwen3MoeTopKRouter``, ``OlmoeTopKRouter``, ``DeepseekV3TopkRouter``, ...): a raw
    ``weight`` of ``(num_experts, hidden)`` run as ``F.linear(x, self.weight)`` on
    tokens flattened by ``x.reshape(-1, self.hidden_dim)``.

    The op is a linear layer's; what the weight alone does not say is the ``hidden_dim``
    the forward reshapes by, so slicing the input channels (``hidden=True``) updates it.
    The outputs are the experts, which the routing's ``topk`` freezes (the masked output
    is the output).  Claimed by name (transformers classes, or their subclasses, ending
    in ``Router``), it covers only those holding their own 2-D ``weight``: a router whose
    weight is an ``nn.Linear`` child's (DBRX, LongCat-Flash, NLLB-MoE) has no kind, its
    Linear and its bare parameters traced as any module's.  One whose forward sizes the
    tokens some other way fails the pruned run and keeps the hidden size whole.

    Example:
        >>> class TopKRouter(nn.Module):  # the layout of transformers' routers
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.hidden_dim = 8
        ...         self.weight = nn.Parameter(torch.randn(4, 8))
        >>> router = TopKRouter()
        >>> kind = RouterKind()
        >>> kind.covers(router), kind.widths(router)
        (True, {'in': 8, 'out': 4})
        >>> plan = kind.plan_slice('gate', router, {'in': [0, 2, 5]})
        >>> tuple(plan.params['weight'].shape), plan.attrs
        ((4, 3), {'hidden_dim': 3})
    """
    module_types = ('transformers.models.mixtral.modeling_mixtral.MixtralTopKRouter', )

    @classmethod
    def claims(cls, module_type: type) -> bool:
        return any(base.__module__.startswith('transformers.') and
                   re.search(r'Router$', base.__name__) is not None
                   for base in module_type.__mro__)

    def covers(self, module: nn.Module) -> bool:
        weight = module._parameters.get('weight')
        return weight is not None and weight.dim() == 2

    def widths(self, module: nn.Module) -> Dict[str, int]:
        experts, hidden = module.weight.shape
        return {'in': hidden, 'out': experts}

    def masked_output(self, module, x, output, keep, call=None):
        """The output as it is: the routing's ``topk`` keeps every expert (and the
        forward returns the logits with the routing's scores and indices)."""
        return output

    def unsliceable(self, module: nn.Module) -> Optional[str]:
        hidden = module.weight.shape[1]
        if getattr(module, 'hidden_dim', hidden) != hidden:
            return (f'its hidden_dim ({module.hidden_dim}) is not its weight\'s input width '
                    f'({hidden})')
        return None

    def plan_slice(self, name: str, module: nn.Module,
                   kept: Dict[str, Sequence[int]]) -> SlicePlan:
        """The weight's kept columns (inputs) and rows (experts), with every other 1-D
        tensor of one entry per expert (a bias, DeepSeek-V3's ``e_score_correction_bias``)
        and ``hidden_dim`` / ``num_experts``.  The routing's ``topk`` keeps the experts
        whole, but the tracer reads from this plan which dims of those tensors hold them."""
        experts, hidden = module.weight.shape
        in_idx = check_indices(name, 'in', kept, hidden)
        out_idx = check_indices(name, 'out', kept, experts)
        plan = SlicePlan(params={'weight': take(take(module.weight, 0, out_idx), 1, in_idx)})
        for table, tensors in ((plan.params, module._parameters),
                               (plan.buffers, module._buffers)):
            for attr, tensor in tensors.items():
                if (attr != 'weight' and tensor is not None and tensor.shape == (experts, )
                        and not is_mask_name(attr)):
                    table[attr] = take(tensor, 0, out_idx)
        if hasattr(module, 'hidden_dim'):
            plan.attrs['hidden_dim'] = len(in_idx)
        if hasattr(module, 'num_experts') and len(out_idx) != experts:
            plan.attrs['num_experts'] = len(out_idx)
        return plan

    def params(self, module: nn.Module, kept: Kept) -> int:
        kept = self.full(module, kept)
        return kept['in'] * kept['out'] + sum(
            p.numel() for n, p in module.named_parameters(recurse=False) if n != 'weight')

    def flops(self, module: nn.Module, inputs: Tuple, output, kept: Kept) -> int:
        """Tokens times kept inputs times experts (the forward returns more than the
        logits, so the tokens are counted on the input)."""
        kept = self.full(module, kept)
        return inputs[0].numel() // module.weight.shape[1] * kept['in'] * kept['out']
