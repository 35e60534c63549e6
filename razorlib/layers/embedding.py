"""EmbeddingKind: nn.Embedding, whose embedding dim is its output channel axis."""
from typing import Dict, Sequence

import torch
import torch.nn as nn

from ..registry import LAYER_KINDS
from .base import Kept, LayerKind, SlicePlan, take
from .common import check_indices

__all__ = ['EmbeddingKind']


@LAYER_KINDS.register_module()
class EmbeddingKind(LayerKind):
    """A lookup table: the embedding dim is the layer's own output channels; a lookup
    costs no multiply-accumulates (OpenMMLab's convention).

    Example:
        >>> EmbeddingKind().params(nn.Embedding(10, 8), {'out': 3})
        30
    """
    module_types = (nn.Embedding, )
    axes = ('out', )
    grad_fns = ('EmbeddingBackward0', )

    def widths(self, module: nn.Module) -> Dict[str, int]:
        return {'out': module.embedding_dim}

    def trace(self, ctx, node, ins, name, module):
        """The embedding dim is the layer's own; frozen under ``max_norm``, which
        renormalises each looked-up row over all of it: a slim table would renormalise
        over the kept dims only, and rewrite its rows in place to that norm."""
        out_slots = ctx.layer_out(name, module.embedding_dim)
        ctx.use(name, 'out', out_slots)
        if module.max_norm is not None:
            ctx.freeze(out_slots, 'mixing', node,
                       f'{name} renormalises each looked-up row over its embedding_dim '
                       f'(max_norm={module.max_norm}), which a slim table would take over the '
                       'kept channels only')
        return out_slots, -1

    def plan_slice(self, name: str, module: nn.Module,
                   kept: Dict[str, Sequence[int]]) -> SlicePlan:
        idx = check_indices(name, 'out', kept, module.embedding_dim)
        return SlicePlan(params={'weight': take(module.weight, 1, idx)},
                         attrs={'embedding_dim': len(idx)})

    def channel_weights(self, module: nn.Module, axis: str) -> torch.Tensor:
        return module.weight.detach().t()

    def params(self, module: nn.Module, kept: Kept) -> int:
        return module.num_embeddings * self.full(module, kept)['out']
