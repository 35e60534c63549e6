"""MultiheadAttentionKind: nn.MultiheadAttention, whose widths razorlib keeps fixed.

``F.multi_head_attention_forward`` checks the query's width against ``embed_dim`` and
splits its packed projection into heads of ``embed_dim // num_heads``, so neither the
input channels nor the heads can change while the module stays an
``nn.MultiheadAttention``: the kind freezes the channels that reach its input projection
(with that reason) and counts what the module costs.  Its ``out_proj`` is an
``nn.Linear`` with a kind of its own.  To prune the heads (and the channels around them),
convert the model first: ``razorlib.nn.split_multihead_attention(model)`` replaces each
``nn.MultiheadAttention`` by a ``SeparateProjectionAttention`` with the same weights and
separate q/k/v projections (:mod:`razorlib.nn.multihead`).
"""
from typing import Dict, Tuple

import torch.nn as nn

from ..registry import LAYER_KINDS
from .base import Kept, LayerKind, kept_widths

__all__ = ['MultiheadAttentionKind']


@LAYER_KINDS.register_module()
class MultiheadAttentionKind(LayerKind):
    """Frozen input projection; FLOPs of the q/k/v and output projections.

    The attention products themselves (``QK^T`` and ``AV``) are counted only when the
    counter is asked to count attention (``get_model_complexity(..., attention=True)``),
    as OpenMMLab's counters leave them out.

    Example:
        >>> import torch
        >>> mha = nn.MultiheadAttention(8, 2, batch_first=True)
        >>> q = torch.randn(1, 5, 8)
        >>> MultiheadAttentionKind().flops(mha, (q, q, q), mha(q, q, q), {}) == 5 * 8 * 8 * 4
        True
    """
    module_types = (nn.MultiheadAttention, )
    grad_fns = ('AddmmBackward0', 'MmBackward0')
    weight_attrs = ('in_proj_weight', 'q_proj_weight', 'k_proj_weight', 'v_proj_weight')

    def widths(self, module: nn.Module) -> Dict[str, int]:
        return {}

    def trace(self, ctx, node, ins, name, module):
        x = ins[1] if node.name() == 'AddmmBackward0' else ins[0]
        if x.channels is not None:
            ctx.freeze_all([x], 'mixing', node,
                           f'{name} is an nn.MultiheadAttention: its embed_dim and heads are '
                           'fixed (its packed input projection splits channels into heads); '
                           'convert it with razorlib.nn.split_multihead_attention(model) to '
                           'prune its heads')
        width = int(node._input_metadata[0].shape[-1])
        return ctx.external(width, node, f'the heads of {name}'), 1

    def flops(self, module: nn.Module, inputs: Tuple, output, kept: Kept) -> int:
        query, key, value = inputs[:3]

        def tokens(t):
            return t.numel() // t.shape[-1] if t.dim() > 1 else 1

        embed = module.embed_dim
        total = (tokens(query) * query.shape[-1] * embed + tokens(key) * key.shape[-1] * embed +
                 tokens(value) * value.shape[-1] * embed)
        proj = module.out_proj
        proj_kept = kept_widths(proj, {'in': proj.in_features, 'out': proj.out_features})
        return total + tokens(query) * proj_kept['in'] * proj_kept['out']
