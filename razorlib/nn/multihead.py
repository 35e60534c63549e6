"""SeparateProjectionAttention: ``nn.MultiheadAttention`` with its heads prunable.

``nn.MultiheadAttention`` keeps q, k and v in one packed ``in_proj_weight`` that
``F.multi_head_attention_forward`` splits into ``embed_dim // num_heads`` wide heads after
checking the query's width against ``embed_dim``: no head can go while it stays one.
:class:`SeparateProjectionAttention` computes the same thing with separate ``q_proj``,
``k_proj`` and ``v_proj`` Linears viewed as ``(B, -1, N, head_dim)`` heads, the pattern
razorlib's tracer prunes by whole heads (:mod:`razorlib.tracing.heads`); slicing then
rewrites its ``num_heads`` (``SeparateProjectionHeads`` in :mod:`razorlib.layers.heads`).
:func:`split_multihead_attention` converts a model's modules in place, weights kept.

Example:
    >>> import torch
    >>> mha = torch.nn.MultiheadAttention(8, 2, batch_first=True).eval()
    >>> attn = SeparateProjectionAttention.from_multihead(mha)
    >>> x = torch.randn(1, 3, 8)
    >>> torch.allclose(attn(x, x, x)[0], mha(x, x, x)[0], atol=1e-6)
    True
"""
import copy
import math
from typing import List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from .replace import replace_children

__all__ = ['SeparateProjectionAttention', 'split_multihead_attention']


class SeparateProjectionAttention(nn.Module):
    """Multi-head attention with separate q/k/v projections: ``nn.MultiheadAttention``'s
    constructor (less ``add_bias_kv`` and ``add_zero_attn``) and forward.

    The forward counts heads from the projections' widths (``view(..., -1, head_dim)``),
    never from ``embed_dim``, so it runs unchanged after whole heads are pruned
    (``q/k/v_proj.out_features == out_proj.in_features == num_heads * head_dim``) and after
    the input channels are: ``embed_dim``, ``kdim`` and ``vdim`` read the projections.
    Without weights it calls ``F.scaled_dot_product_attention``; with them it computes
    ``softmax(QK^T / sqrt(head_dim) + mask) V`` as torch does.  A per-head 3-D
    ``attn_mask`` (``(B * num_heads, L, S)``) must hold rows for the heads it keeps.

    razorlib prunes the heads of a call with ``need_weights=False`` (torchvision's ViT)
    or ``average_attn_weights=False``; weights averaged over the heads (the default
    ``need_weights=True``) mix them, so the heads stay whole even where the caller drops
    the weights: pass ``need_weights=False`` there.

    Args:
        embed_dim: the query's width, and the output's.
        num_heads: heads of ``embed_dim // num_heads`` channels.
        dropout: dropout on the attention weights, in training.
        bias: whether the projections have biases.
        kdim, vdim: the key's and value's widths (default ``embed_dim``).
        batch_first: inputs and output are ``(B, N, E)`` rather than ``(N, B, E)``.

    Example:
        >>> import torch
        >>> attn = SeparateProjectionAttention(8, 2, batch_first=True)
        >>> x = torch.randn(2, 5, 8)
        >>> out, weights = attn(x, x, x)
        >>> out.shape, weights.shape
        (torch.Size([2, 5, 8]), torch.Size([2, 5, 5]))
        >>> attn.q_proj, attn.k_proj, attn.v_proj = (torch.nn.Linear(8, 4) for _ in 'qkv')
        >>> attn.out_proj = torch.nn.Linear(4, 8)  # one head of 4 left
        >>> attn(x, x, x, need_weights=False)[0].shape
        torch.Size([2, 5, 8])
    """
    # torch's Transformer layers read these off their attention for their fused fast
    # paths, which need the packed projection: None and False send them to forward.
    in_proj_weight = None
    in_proj_bias = None
    _qkv_same_embed_dim = False

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 kdim: Optional[int] = None, vdim: Optional[int] = None,
                 batch_first: bool = False, device=None, dtype=None):
        super().__init__()
        if num_heads < 1 or embed_dim % num_heads:
            raise ValueError(f'{type(self).__name__}: embed_dim {embed_dim} is not divisible by '
                             f'num_heads {num_heads}')
        self.num_heads, self.head_dim = num_heads, embed_dim // num_heads
        self.dropout, self.batch_first = dropout, batch_first
        factory = dict(bias=bias, device=device, dtype=dtype)
        self.q_proj = nn.Linear(embed_dim, embed_dim, **factory)
        self.k_proj = nn.Linear(embed_dim if kdim is None else kdim, embed_dim, **factory)
        self.v_proj = nn.Linear(embed_dim if vdim is None else vdim, embed_dim, **factory)
        self.out_proj = nn.Linear(embed_dim, embed_dim, **factory)
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        """``nn.MultiheadAttention``'s initialisation (of its separate-weight layout)."""
        for proj in (self.q_proj, self.k_proj, self.v_proj):
            nn.init.xavier_uniform_(proj.weight)
        for proj in (self.q_proj, self.k_proj, self.v_proj, self.out_proj):
            if proj.bias is not None:
                nn.init.zeros_(proj.bias)

    @property
    def embed_dim(self) -> int:
        """The query's width (``q_proj``'s input)."""
        return self.q_proj.in_features

    @property
    def kdim(self) -> int:
        return self.k_proj.in_features

    @property
    def vdim(self) -> int:
        return self.v_proj.in_features

    @classmethod
    def from_multihead(cls, mha: nn.MultiheadAttention) -> 'SeparateProjectionAttention':
        """The same attention as ``mha``, with its weights, device, dtype, ``requires_grad``
        and train/eval mode.  Raises ValueError for what it cannot express."""
        problem = _unsupported(mha)
        if problem is not None:
            what = 'an nn.MultiheadAttention' if type(mha) is nn.MultiheadAttention else \
                f'a {type(mha).__name__} (nn.MultiheadAttention)'
            raise ValueError(f'cannot convert {what} with {problem}')
        weight = mha.out_proj.weight
        attn = cls(mha.embed_dim, mha.num_heads, mha.dropout, mha.in_proj_bias is not None,
                   mha.kdim, mha.vdim, mha.batch_first, device=weight.device, dtype=weight.dtype)
        for proj, (w, b) in zip((attn.q_proj, attn.k_proj, attn.v_proj), _in_projections(mha)):
            with torch.no_grad():
                proj.weight.copy_(w)
                if b is not None:
                    proj.bias.copy_(b)
            proj.weight.requires_grad_(w.requires_grad)
            if b is not None:
                proj.bias.requires_grad_(b.requires_grad)
        attn.out_proj = copy.deepcopy(mha.out_proj)
        return attn.train(mha.training)

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                key_padding_mask: Optional[torch.Tensor] = None, need_weights: bool = True,
                attn_mask: Optional[torch.Tensor] = None, average_attn_weights: bool = True,
                is_causal: bool = False) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        """``nn.MultiheadAttention.forward``: ``(output, weights or None)``.

        As there, ``is_causal`` is a hint that ``attn_mask`` is causal (which it needs);
        bool masks are True where attention is not allowed, float masks are added.
        """
        batched = query.dim() == 3
        query, key, value = (self._to_batch_first(t, batched) for t in (query, key, value))
        if is_causal and attn_mask is None:
            raise RuntimeError('Need attn_mask if specifying the is_causal hint (as '
                               'nn.MultiheadAttention does)')
        causal = is_causal and key_padding_mask is None and not need_weights
        if not causal:  # a causal hint drops the mask unread, as in torch
            self._check_masks(attn_mask, key_padding_mask, query, key, batched)
        if key_padding_mask is not None and not batched:
            key_padding_mask = key_padding_mask.unsqueeze(0)
        mask = None if causal else self._merged_mask(attn_mask, key_padding_mask, query)
        q, k, v = (self._heads(proj(t)) for proj, t in
                   ((self.q_proj, query), (self.k_proj, key), (self.v_proj, value)))
        dropout = self.dropout if self.training else 0.0
        weights = None
        if need_weights:
            weights = _attention_weights(q, k, mask, dropout)
            out = weights @ v
            if average_attn_weights:
                weights = weights.mean(dim=1)
        else:
            out = F.scaled_dot_product_attention(q, k, v, mask, dropout, causal)
        out = self.out_proj(out.transpose(1, 2).reshape(query.shape[0], query.shape[1], -1))
        if not batched:
            return out.squeeze(0), None if weights is None else weights.squeeze(0)
        return (out if self.batch_first else out.transpose(0, 1)), weights

    def _to_batch_first(self, x: torch.Tensor, batched: bool) -> torch.Tensor:
        if not batched:
            return x.unsqueeze(0)
        return x if self.batch_first else x.transpose(0, 1)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, N, heads * head_dim)`` as ``(B, heads, N, head_dim)``, heads counted by the
        projection's width."""
        return x.reshape(x.shape[0], x.shape[1], -1, self.head_dim).transpose(1, 2)

    def _check_masks(self, attn_mask: Optional[torch.Tensor],
                     key_padding_mask: Optional[torch.Tensor], query: torch.Tensor,
                     key: torch.Tensor, batched: bool) -> None:
        """Refuse masks of other shapes than ``nn.MultiheadAttention`` takes (``query`` and
        ``key`` made batch first, the masks as given), which would fail a reshape or a
        broadcast without naming the mask: most likely a 3-D ``attn_mask`` made for the
        heads the module had before pruning.

        Raises:
            ValueError: naming the mask, the shapes it may have and its own.
        """
        (batch, length), source = query.shape[:2], key.shape[1]
        per_head = (batch * self.num_heads if batched else self.num_heads, length, source)
        if attn_mask is not None and tuple(attn_mask.shape) not in ((length, source), per_head):
            raise ValueError(
                f'{type(self).__name__}: attn_mask must be (L, S) = {(length, source)} or, per '
                f'head, {per_head} (rows for its {self.num_heads} heads, those it keeps once '
                f'pruned), got {tuple(attn_mask.shape)}')
        padding = (batch, source) if batched else (source, )
        if key_padding_mask is not None and tuple(key_padding_mask.shape) != padding:
            raise ValueError(f'{type(self).__name__}: key_padding_mask must be {padding} '
                             f'(batch, S), got {tuple(key_padding_mask.shape)}')

    def _merged_mask(self, attn_mask: Optional[torch.Tensor],
                     key_padding_mask: Optional[torch.Tensor],
                     query: torch.Tensor) -> Optional[torch.Tensor]:
        """One additive mask that broadcasts over ``(B, heads, L, S)``, or None."""
        masks = []
        if attn_mask is not None:
            mask = _additive(attn_mask, query.dtype)
            if mask.dim() == 3:  # (B * heads, L, S)
                mask = mask.view(query.shape[0], self.num_heads, *mask.shape[1:])
            masks.append(mask)
        if key_padding_mask is not None:
            mask = _additive(key_padding_mask, query.dtype)
            masks.append(mask.view(mask.shape[0], 1, 1, mask.shape[-1]))
        if not masks:
            return None
        return masks[0] if len(masks) == 1 else masks[0] + masks[1]

    def extra_repr(self) -> str:
        return f'num_heads={self.num_heads}, head_dim={self.head_dim}, ' \
               f'batch_first={self.batch_first}'


def _additive(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A bool mask (True: not allowed) as ``-inf``/0 of ``dtype``; a float mask as it is;
    any other (a legacy byte mask) refused, as ``nn.MultiheadAttention`` refuses it."""
    if mask.is_floating_point():
        return mask
    if mask.dtype != torch.bool:
        raise TypeError(f'attention masks must be bool (True: not allowed) or floating point '
                        f'(added to the scores), got {mask.dtype}, as nn.MultiheadAttention '
                        'requires')
    return torch.zeros_like(mask, dtype=dtype).masked_fill_(mask, float('-inf'))


def _attention_weights(q: torch.Tensor, k: torch.Tensor, mask: Optional[torch.Tensor],
                       dropout: float) -> torch.Tensor:
    """``softmax(QK^T / sqrt(head_dim) + mask)``, dropped out as torch does."""
    scores = (q * math.sqrt(1.0 / q.shape[-1])) @ k.transpose(-2, -1)
    if mask is not None:
        scores = scores + mask
    weights = scores.softmax(dim=-1)
    return F.dropout(weights, p=dropout) if dropout > 0.0 else weights


def _unsupported(mha: nn.MultiheadAttention) -> Optional[str]:
    """What of ``mha`` a SeparateProjectionAttention does not compute, or None."""
    if mha.bias_k is not None or mha.bias_v is not None:
        return 'add_bias_kv=True (learned key/value rows appended to the sequence)'
    if mha.add_zero_attn:
        return 'add_zero_attn=True (a zero key/value row appended to the sequence)'
    if type(mha).forward is not nn.MultiheadAttention.forward:
        return 'a forward of its own'
    return None


def _in_projections(
        mha: nn.MultiheadAttention) -> List[Tuple[torch.Tensor, Optional[torch.Tensor]]]:
    """``(weight, bias)`` of the query, key and value projections packed in ``mha``."""
    if mha._qkv_same_embed_dim:
        weights = mha.in_proj_weight.chunk(3)
    else:
        weights = (mha.q_proj_weight, mha.k_proj_weight, mha.v_proj_weight)
    biases = (None, ) * 3 if mha.in_proj_bias is None else mha.in_proj_bias.chunk(3)
    return list(zip(weights, biases))


def split_multihead_attention(model: nn.Module) -> nn.Module:
    """Replace every ``nn.MultiheadAttention`` in ``model`` by a
    :class:`SeparateProjectionAttention` with the same weights, so that razorlib can
    prune its heads; in place, and returns ``model``.

    A module shared by several parents stays shared.  Every module is checked before any
    is replaced: one it cannot convert (``add_bias_kv``, ``add_zero_attn``, a subclass
    with a forward of its own) raises ValueError naming it, with ``model`` unchanged.
    ``nn.TransformerEncoder``'s nested-tensor fast path, which reads the packed
    projection, is turned off where its layers' attention is converted.

    Example:
        >>> import torch, razorlib
        >>> class SelfAttention(torch.nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.attn = torch.nn.MultiheadAttention(16, 4, batch_first=True)
        ...         self.head = torch.nn.Linear(16, 3)
        ...     def forward(self, x):
        ...         return self.head(self.attn(x, x, x, need_weights=False)[0])
        >>> model, x = SelfAttention().eval(), torch.randn(2, 5, 16)
        >>> dense = model(x)
        >>> type(split_multihead_attention(model).attn).__name__
        'SeparateProjectionAttention'
        >>> torch.allclose(model(x), dense, atol=1e-6)
        True
        >>> slim = razorlib.prune(model, x, ratio=0.5)
        >>> slim.attn.num_heads, slim.attn.q_proj
        (2, Linear(in_features=16, out_features=8, bias=True))
    """
    if isinstance(model, nn.MultiheadAttention):
        raise ValueError('the model itself is an nn.MultiheadAttention: convert it with '
                         'SeparateProjectionAttention.from_multihead(model)')

    replace_children(model, lambda m: isinstance(m, nn.MultiheadAttention),
                     SeparateProjectionAttention.from_multihead, unsupported=_unsupported,
                     converter='split_multihead_attention')
    _leave_nested_fast_path(model)
    return model


def _leave_nested_fast_path(model: nn.Module) -> None:
    """Turn off ``nn.TransformerEncoder``'s nested-tensor fast path where its first
    layer's attention is converted: the path packs that layer's ``in_proj_weight``."""
    for module in model.modules():
        if isinstance(module, nn.TransformerEncoder) and isinstance(
                getattr(module.layers[0], 'self_attn', None), SeparateProjectionAttention):
            module.use_nested_tensor = False
