"""WindowAttention: torchvision's Swin attention with its heads prunable.

torchvision's ``ShiftedWindowAttention`` (Swin) and ``ShiftedWindowAttentionV2`` (Swin
V2) hand ``self.qkv.weight`` and ``self.proj.weight`` to a function that calls
``F.linear`` on them, sizes the heads as ``C // num_heads`` from the input's width ``C``
and reshapes the attention output back to ``C``: the projections run outside their
modules' forwards (where razorlib's masks cannot apply) and fewer heads break the
reshapes.  :class:`WindowAttention` computes the same thing by calling its projections
and counting each head's width from them (``reshape(..., 3, num_heads, -1)``), with the
relative position bias read through its index as torchvision reads it, so razorlib
prunes whole heads, the bias table's columns (V1) or the bias MLP's outputs and logit
scales (V2) with them.  :func:`convert_window_attention` converts a model in place.

The parameters and buffers keep torchvision's names, so a torchvision checkpoint loads
into a converted model.

Example:
    >>> attn = WindowAttention(16, [2, 2], [1, 1], num_heads=4)
    >>> attn(torch.randn(1, 5, 7, 16)).shape  # padded to whole windows inside
    torch.Size([1, 5, 7, 16])
"""
import math
from typing import List, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from .replace import replace_children

__all__ = ['WindowAttention', 'convert_window_attention']


class WindowAttention(nn.Module):
    """Window multi-head self-attention with a relative position bias, shifted windows
    masked as in Swin; torchvision's ``ShiftedWindowAttention`` constructor, and with
    ``v2=True`` its ``ShiftedWindowAttentionV2`` (cosine attention with a learned logit
    scale, the bias from a small MLP of log-spaced relative coordinates).

    Heads are counted from the projections (``qkv.out_features // 3 // num_heads`` wide,
    ``proj`` maps them back to the input's width), so the module runs unchanged after
    whole heads are pruned; razorlib rewrites ``num_heads`` then
    (:mod:`razorlib.layers.heads`).  Dropout applies in training only (torchvision's
    function passes no ``training=`` to ``F.dropout``; its models use 0).

    V2 ignores the key's bias, as torchvision does: it is zeroed here at construction
    (:meth:`from_torchvision` zeroes the copy's), and trained with the rest afterwards.

    Args:
        dim: the input's (and output's) width.
        window_size, shift_size: ``[h, w]`` of a window and of the cyclic shift.
        num_heads: heads of ``dim // num_heads`` channels.
        qkv_bias, proj_bias: whether the projections have biases.
        attention_dropout, dropout: dropout on the attention weights and the output.
        v2: Swin V2's attention.
        pretrained_window_size: V2: the window size the relative coordinates are
            normalised by (``[0, 0]``: ``window_size``).
    """

    def __init__(self, dim: int, window_size: Sequence[int], shift_size: Sequence[int],
                 num_heads: int, qkv_bias: bool = True, proj_bias: bool = True,
                 attention_dropout: float = 0.0, dropout: float = 0.0, v2: bool = False,
                 pretrained_window_size: Sequence[int] = (0, 0)):
        super().__init__()
        if len(window_size) != 2 or len(shift_size) != 2:
            raise ValueError('WindowAttention: window_size and shift_size must be [h, w]')
        if num_heads < 1 or dim % num_heads:  # else the forward's reshape fails, unexplained
            raise ValueError(f'WindowAttention: dim {dim} is not divisible by num_heads '
                             f'{num_heads}')
        self.window_size, self.shift_size = list(window_size), list(shift_size)
        self.num_heads, self.v2 = num_heads, v2
        self.attention_dropout, self.dropout = attention_dropout, dropout
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim, bias=proj_bias)
        h, w = self.window_size
        self.register_buffer('relative_position_index', _relative_index(h, w))
        if v2:
            self.logit_scale = nn.Parameter(torch.full((num_heads, 1, 1), math.log(10.0)))
            self.cpb_mlp = nn.Sequential(nn.Linear(2, 512), nn.ReLU(inplace=True),
                                         nn.Linear(512, num_heads, bias=False))
            self.register_buffer('relative_coords_table',
                                 _log_coords(h, w, list(pretrained_window_size)))
            if qkv_bias:
                with torch.no_grad():
                    self.qkv.bias[dim:2 * dim].zero_()
        else:
            self.relative_position_bias_table = nn.Parameter(
                torch.zeros((2 * h - 1) * (2 * w - 1), num_heads))
            nn.init.trunc_normal_(self.relative_position_bias_table, std=0.02)

    @classmethod
    def from_torchvision(cls, source: nn.Module) -> 'WindowAttention':
        """The same attention as torchvision's ``source``, its parameters and buffers
        copied, on their device and in their dtype (the module itself is left as it is).

        Raises:
            ValueError: ``source`` is not laid out as torchvision's (see
                :func:`torchvision_layout`), naming what it lacks.
        """
        problem = torchvision_layout(source)
        if problem:
            raise ValueError(f'{type(source).__name__}: {problem}')
        v2 = hasattr(source, 'cpb_mlp')
        attn = cls(source.qkv.in_features, source.window_size, source.shift_size,
                   source.num_heads, qkv_bias=source.qkv.bias is not None,
                   proj_bias=source.proj.bias is not None,
                   attention_dropout=source.attention_dropout, dropout=source.dropout, v2=v2,
                   pretrained_window_size=getattr(source, 'pretrained_window_size', (0, 0)))
        weight = source.qkv.weight
        attn.to(device=weight.device, dtype=weight.dtype).load_state_dict(source.state_dict())
        if v2 and attn.qkv.bias is not None:
            with torch.no_grad():
                attn.qkv.bias.view(3, -1)[1].zero_()
        return attn.train(source.training)

    def relative_position_bias(self) -> torch.Tensor:
        """``(1, heads, n, n)``: the bias added to a window's attention logits."""
        table = (self.cpb_mlp(self.relative_coords_table).flatten(0, 2) if self.v2
                 else self.relative_position_bias_table)
        n = self.window_size[0] * self.window_size[1]
        bias = table[self.relative_position_index].view(n, n, -1).permute(2, 0, 1)
        bias = bias.contiguous().unsqueeze(0)
        return 16 * torch.sigmoid(bias) if self.v2 else bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, H, W, C)`` to ``(B, H, W, C)``."""
        b, height, width, _ = x.shape
        (wh, ww), (sh, sw) = self.window_size, self.shift_size
        x = F.pad(x, (0, 0, 0, -width % ww, 0, -height % wh))
        ph, pw = x.shape[1], x.shape[2]
        sh, sw = (0 if wh >= ph else sh), (0 if ww >= pw else sw)
        if sh or sw:
            x = torch.roll(x, shifts=(-sh, -sw), dims=(1, 2))
        windows, n = (ph // wh) * (pw // ww), wh * ww
        x = x.view(b, ph // wh, wh, pw // ww, ww, -1).permute(0, 1, 3, 2, 4, 5)
        x = x.reshape(b * windows, n, -1)
        q, k, v = self.qkv(x).reshape(b * windows, n, 3, self.num_heads, -1).permute(
            2, 0, 3, 1, 4).unbind(0)
        if self.v2:
            attn = F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-2, -1)
            attn = attn * torch.clamp(self.logit_scale, max=math.log(100.0)).exp()
        else:
            attn = (q * q.shape[-1] ** -0.5) @ k.transpose(-2, -1)
        attn = attn + self.relative_position_bias()
        if sh or sw:
            mask = _shift_mask(ph, pw, wh, ww, sh, sw, x)
            attn = attn.view(b, windows, self.num_heads, n, n) + mask[None, :, None]
            attn = attn.view(b * windows, self.num_heads, n, n)
        attn = F.dropout(attn.softmax(-1), self.attention_dropout, self.training)
        x = self.proj((attn @ v).transpose(1, 2).reshape(b * windows, n, -1))
        x = F.dropout(x, self.dropout, self.training)
        x = x.view(b, ph // wh, pw // ww, wh, ww, -1).permute(0, 1, 3, 2, 4, 5)
        x = x.reshape(b, ph, pw, -1)
        if sh or sw:
            x = torch.roll(x, shifts=(sh, sw), dims=(1, 2))
        return x[:, :height, :width].contiguous()


def _relative_index(h: int, w: int) -> torch.Tensor:
    """For each pair of a window's positions, the row of their offset in a
    ``(2h - 1) * (2w - 1)`` table."""
    rows, cols = torch.meshgrid(torch.arange(h), torch.arange(w), indexing='ij')
    rows, cols = rows.flatten(), cols.flatten()
    dr = rows[:, None] - rows[None, :] + h - 1
    dc = cols[:, None] - cols[None, :] + w - 1
    return (dr * (2 * w - 1) + dc).flatten()


def _log_coords(h: int, w: int, pretrained: List[int]) -> torch.Tensor:
    """Swin V2's ``(1, 2h - 1, 2w - 1, 2)`` relative coordinates: scaled to [-8, 8] by
    the (pretrained) window size, then ``sign * log2(1 + |c|) / 3``."""
    sizes = pretrained if pretrained[0] > 0 else [h, w]
    axes = [torch.arange(-(s - 1), s, dtype=torch.float32) / (p - 1) * 8
            for s, p in zip((h, w), sizes)]
    coords = torch.stack(torch.meshgrid(*axes, indexing='ij'), -1).unsqueeze(0)
    return torch.sign(coords) * torch.log2(coords.abs() + 1.0) / 3.0


def _shift_mask(ph: int, pw: int, wh: int, ww: int, sh: int, sw: int,
                like: torch.Tensor) -> torch.Tensor:
    """``(windows, n, n)``: -100 between positions a cyclic shift brought together from
    different regions of the padded map, 0 elsewhere."""
    region = like.new_zeros(ph, pw)
    label = 0
    for rows in (slice(0, -wh), slice(-wh, -sh), slice(-sh, None)):
        for cols in (slice(0, -ww), slice(-ww, -sw), slice(-sw, None)):
            region[rows, cols] = label
            label += 1
    region = region.view(ph // wh, wh, pw // ww, ww).permute(0, 2, 1, 3).reshape(-1, wh * ww)
    apart = region[:, None, :] != region[:, :, None]
    return like.new_zeros(apart.shape).masked_fill(apart, -100.0)


def torchvision_layout(module: nn.Module) -> str:
    """What ``module`` lacks of torchvision's Swin attention layout, or ``''``."""
    for attr in ('qkv', 'proj'):
        if not isinstance(getattr(module, attr, None), nn.Linear):
            return f'no nn.Linear {attr!r}'
    for attr in ('window_size', 'shift_size', 'num_heads', 'attention_dropout', 'dropout',
                 'relative_position_index'):
        if not hasattr(module, attr):
            return f'no {attr!r}'
    if not (hasattr(module, 'relative_position_bias_table') or hasattr(module, 'cpb_mlp')):
        return "neither 'relative_position_bias_table' nor 'cpb_mlp'"
    return ''


def _is_torchvision_window_attention(module: nn.Module) -> bool:
    return type(module).__name__ in ('ShiftedWindowAttention', 'ShiftedWindowAttentionV2') \
        and not isinstance(module, WindowAttention)


def convert_window_attention(model: nn.Module) -> nn.Module:
    """Replace every torchvision ``ShiftedWindowAttention`` / ``ShiftedWindowAttentionV2``
    in ``model`` by a :class:`WindowAttention` with the same weights, so that razorlib can
    prune its heads; in place, and returns ``model``.

    Modules are recognised by their class names (torchvision is an optional package);
    every one is checked before any is replaced, and one that is not laid out as
    torchvision's raises ValueError naming it, with ``model`` unchanged.  A module shared
    by several parents stays shared.
    """
    return replace_children(model, _is_torchvision_window_attention,
                            WindowAttention.from_torchvision, unsupported=torchvision_layout,
                            converter='convert_window_attention')
