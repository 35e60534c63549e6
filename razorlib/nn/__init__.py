"""Modules razorlib provides so that layers become prunable.

Some torch modules compute in ways whose widths cannot change while they stay what they
are: ``nn.MultiheadAttention`` splits one packed projection into heads inside
``F.multi_head_attention_forward``, torchvision's Swin attention runs ``F.linear`` on its
projections' weights, transformers' mixture-of-experts layers hold all their experts in
two 3-D tensors.  The modules here compute the same thing in a form
razorlib's tracer follows and its slicing can narrow, and each comes with a function
that converts a model in place, keeping its weights.

Example:
    >>> import torch, razorlib
    >>> from razorlib.nn import split_multihead_attention
    >>> model = torch.nn.Sequential(torch.nn.MultiheadAttention(8, 2))
    >>> type(split_multihead_attention(model)[0]).__name__
    'SeparateProjectionAttention'
"""
from .experts import (ClampedSwiGLU, EveryTokenExperts, Expert, SplitExperts, fuse_experts,
                      split_experts)
from .multihead import SeparateProjectionAttention, split_multihead_attention
from .window import WindowAttention, convert_window_attention

__all__ = ['SeparateProjectionAttention', 'split_multihead_attention', 'WindowAttention',
           'convert_window_attention', 'ClampedSwiGLU', 'Expert', 'SplitExperts',
           'EveryTokenExperts', 'split_experts', 'fuse_experts']
