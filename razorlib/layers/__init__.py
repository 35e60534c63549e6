"""One home per layer kind: what razorlib knows about each module type.

See :mod:`razorlib.layers.base` for what a :class:`LayerKind` answers and
``docs/layer_kinds.md`` for adding one.
"""
from .attention import MultiheadAttentionKind
from .base import IN_MASK, OUT_MASK, Kept, LayerKind, SlicePlan, kept_widths, take
from .conv import ConvKind
from .embedding import EmbeddingKind
from .heads import HeadAttributes, head_attributes_of
from .hf import HFConv1DKind, RouterKind
from .linear import LinearKind
from .norm import (BatchNormKind, GroupNormKind, InstanceNormKind, LayerNormKind, NormKind,
                   RMSNormKind)
from .parameter import kept_param_size, param_channel_weights, param_mask_name, plan_param
from .prelu import PReLUKind
from .table import KindTable, LayerKindsArg, as_table, kind_of

__all__ = [
    'IN_MASK', 'OUT_MASK', 'Kept', 'LayerKind', 'SlicePlan', 'kept_widths', 'take',
    'ConvKind', 'LinearKind', 'EmbeddingKind', 'HFConv1DKind', 'RouterKind', 'NormKind',
    'BatchNormKind', 'InstanceNormKind', 'LayerNormKind', 'GroupNormKind', 'RMSNormKind',
    'MultiheadAttentionKind',
    'PReLUKind',
    'KindTable', 'LayerKindsArg',
    'as_table', 'kind_of', 'param_mask_name', 'plan_param', 'param_channel_weights',
    'kept_param_size', 'HeadAttributes', 'head_attributes_of',
]
