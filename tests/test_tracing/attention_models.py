"""Attention written the ways real models write it, in our own small modules.

torchvision's wheel does not import against the CPU torch, so its ViT and Swin patterns
are reproduced here: fused ``qkv`` (timm, torchvision), separate projections with
grouped-query attention and rotary embeddings (Llama), ``F.scaled_dot_product_attention``,
and Swin's shifted windows with a relative position bias and ``F.linear`` called on a
module's weight inside a function.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

DIM, TOKENS = 32, 6


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def repeat_kv(x: torch.Tensor, groups: int) -> torch.Tensor:
    """Llama's: each key/value head repeated for its ``groups`` query heads."""
    b, kv_heads, n, d = x.shape
    return x[:, :, None].expand(b, kv_heads, groups, n, d).reshape(b, kv_heads * groups, n, d)


class Rotary(nn.Module):
    """Hugging Face's rotary embedding: ``inv_freq`` as a buffer, ``cos``/``sin`` of
    ``cat(freqs, freqs)`` computed under ``no_grad`` (autograd does not see them)."""

    def __init__(self, head_dim: int, theta: float = 100.0):
        super().__init__()
        self.register_buffer('inv_freq', theta ** -(torch.arange(0, head_dim, 2) / head_dim),
                             persistent=False)

    @torch.no_grad()
    def forward(self, tokens: int):
        freqs = torch.arange(tokens, device=self.inv_freq.device)[:, None] * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()


class SeparateQKV(nn.Module):
    """Llama-style: q/k/v/o projections, ``view(B, N, -1, head_dim)``, optional GQA
    (``repeat_kv`` or SDPA's ``enable_gqa``), RoPE, manual softmax or SDPA.

    ``counted_heads`` views by the head counts it keeps as attributes instead of ``-1``
    (older Llama: ``view(B, N, self.num_heads, self.head_dim)``).  RoPE's ``cos``/``sin``
    are buffers (``rope=True``) or come from a :class:`Rotary` module (``rotary=``, which
    several attentions may share).  The scores are scaled by ``self.scaling``, set once
    as Llama does; ``scale_from_head_dim`` scales by ``self.head_dim ** -0.5`` on each
    call instead (SDPA: its default scale)."""

    def __init__(self, heads: int = 4, kv_heads: int = 4, head_dim: int = 8,
                 sdpa: bool = False, rope: bool = False, gqa_in_sdpa: bool = False,
                 counted_heads: bool = False, rotary: nn.Module = None,
                 scale_from_head_dim: bool = False):
        super().__init__()
        self.head_dim, self.num_key_value_groups = head_dim, heads // kv_heads
        self.num_heads, self.num_key_value_heads = heads, kv_heads
        self.sdpa, self.rope, self.gqa_in_sdpa = sdpa, rope, gqa_in_sdpa
        self.counted_heads, self.rotary = counted_heads, rotary
        self.scaling, self.scale_from_head_dim = head_dim ** -0.5, scale_from_head_dim
        self.q_proj = nn.Linear(DIM, heads * head_dim)
        self.k_proj = nn.Linear(DIM, kv_heads * head_dim)
        self.v_proj = nn.Linear(DIM, kv_heads * head_dim)
        self.o_proj = nn.Linear(heads * head_dim, DIM)
        angles = torch.arange(TOKENS)[:, None] / 10 ** (torch.arange(head_dim) / head_dim)
        self.register_buffer('cos', angles.cos(), persistent=False)
        self.register_buffer('sin', angles.sin(), persistent=False)

    def forward(self, x):
        counts = (self.num_heads, self.num_key_value_heads, self.num_key_value_heads) \
            if self.counted_heads else (-1, ) * 3
        q, k, v = (proj(x).view(*x.shape[:-1], count, self.head_dim).transpose(1, 2)
                   for proj, count in zip((self.q_proj, self.k_proj, self.v_proj), counts))
        if self.rope or self.rotary is not None:
            cos, sin = (self.cos, self.sin) if self.rotary is None else self.rotary(x.shape[1])
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
        scale = self.head_dim ** -0.5 if self.scale_from_head_dim else self.scaling
        given = {} if self.scale_from_head_dim else {'scale': scale}
        if self.sdpa and self.gqa_in_sdpa:
            out = F.scaled_dot_product_attention(q, k, v, enable_gqa=True, **given)
        else:
            k, v = (repeat_kv(t, self.num_key_value_groups) for t in (k, v))
            if self.sdpa:
                out = F.scaled_dot_product_attention(q, k, v, **given)
            else:
                attn = (q @ k.transpose(-2, -1)) * scale
                out = attn.softmax(-1) @ v
        return self.o_proj(out.transpose(1, 2).reshape(*x.shape[:-1], -1))


class FusedQKV(nn.Module):
    """timm's ``Attention``: ``qkv.reshape(B, N, 3, self.num_heads, self.head_dim)``
    with the head count as a literal attribute."""

    def __init__(self, heads: int = 4, head_dim: int = 8):
        super().__init__()
        self.num_heads, self.head_dim = heads, head_dim
        self.qkv = nn.Linear(DIM, 3 * heads * head_dim)
        self.proj = nn.Linear(heads * head_dim, DIM)

    def forward(self, x):
        b, n, _ = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        attn = (q * self.head_dim ** -0.5) @ k.transpose(-2, -1)
        return self.proj((attn.softmax(-1) @ v).transpose(1, 2).reshape(b, n, -1))


class FusedMQA(nn.Module):
    """GPTBigCode's multi-query layout: one ``c_attn`` computes the queries, then one key
    and one value head, cut by ``split((self.embed_dim, self.kv_dim, self.kv_dim))``;
    the key/value head is repeated by ``repeat_kv``, or broadcast by SDPA
    (``sdpa=True``, ``enable_gqa``)."""

    def __init__(self, heads: int = 4, head_dim: int = 8, sdpa: bool = False):
        super().__init__()
        self.multi_query, self.sdpa = True, sdpa
        self.num_heads, self.head_dim, self.kv_heads = heads, head_dim, 1
        self.embed_dim = self.split_size = heads * head_dim
        self.kv_dim, self.num_key_value_groups = head_dim, heads
        self.c_attn = nn.Linear(DIM, self.embed_dim + 2 * self.kv_dim)
        self.c_proj = nn.Linear(self.embed_dim, DIM)

    def forward(self, x):
        q, k, v = self.c_attn(x).unsqueeze(1).split((self.embed_dim, self.kv_dim,
                                                     self.kv_dim), dim=3)
        q = q.view(*x.shape[:-1], -1, self.head_dim).transpose(1, 2)
        if self.sdpa:
            out = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        else:
            k, v = (repeat_kv(t, self.num_key_value_groups) for t in (k, v))
            out = ((q @ k.transpose(-2, -1)) * self.head_dim ** -0.5).softmax(-1) @ v
        return self.c_proj(out.transpose(1, 2).reshape(*x.shape[:-1], -1))


class Block(nn.Module):
    """Pre-norm transformer block around any attention above."""

    def __init__(self, attn: nn.Module, hidden: int = 64):
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(DIM), attn
        self.norm2 = nn.LayerNorm(DIM)
        self.mlp = nn.Sequential(nn.Linear(DIM, hidden), nn.GELU(), nn.Linear(hidden, DIM))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class Encoder(nn.Module):
    """Tokens in, a Linear head out (the hidden size reaches the output and stays whole)."""

    def __init__(self, *blocks: nn.Module):
        super().__init__()
        self.embed = nn.Linear(8, DIM)
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(DIM, 5)

    def forward(self, x):
        return self.head(self.blocks(self.embed(x)).mean(1))


def shifted_window_attention(x, qkv_weight, proj_weight, relative_position_bias, window,
                             num_heads, shift, qkv_bias=None, proj_bias=None):
    """torchvision's ``shifted_window_attention`` for square windows, cut down: the
    module's weights come in as tensors and go through ``F.linear``."""
    b, h, w, c = x.shape
    if shift:
        x = torch.roll(x, shifts=(-shift, -shift), dims=(1, 2))
    x = x.view(b, h // window, window, w // window, window, c).permute(0, 1, 3, 2, 4, 5)
    x = x.reshape(-1, window * window, c)
    qkv = F.linear(x, qkv_weight, qkv_bias)
    qkv = qkv.reshape(x.size(0), x.size(1), 3, num_heads, c // num_heads).permute(2, 0, 3, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]
    attn = (q * (c // num_heads) ** -0.5).matmul(k.transpose(-2, -1))
    attn = attn + relative_position_bias
    x = attn.softmax(-1).matmul(v).transpose(1, 2).reshape(x.size(0), x.size(1), c)
    x = F.linear(x, proj_weight, proj_bias)
    x = x.view(b, h // window, w // window, window, window, c).permute(0, 1, 3, 2, 4, 5)
    x = x.reshape(b, h, w, c)
    if shift:
        x = torch.roll(x, shifts=(shift, shift), dims=(1, 2))
    return x


class ShiftedWindowAttention(nn.Module):
    """torchvision's layout: a relative position bias table indexed by a buffer, and the
    projections' weights handed to :func:`shifted_window_attention`; ``timm=True``: timm's
    ``WindowAttention`` instead, which calls its projections and sizes its heads from
    ``num_heads`` alone (``reshape(..., 3, num_heads, -1)``)."""

    def __init__(self, dim: int, heads: int, window: int = 2, shift: int = 0,
                 timm: bool = False):
        super().__init__()
        self.window, self.shift, self.num_heads, self.timm = window, shift, heads, timm
        self.qkv, self.proj = nn.Linear(dim, dim * 3), nn.Linear(dim, dim)
        self.relative_position_bias_table = nn.Parameter(
            torch.randn((2 * window - 1) ** 2, heads) * 0.02)
        coords = torch.stack(torch.meshgrid(torch.arange(window), torch.arange(window),
                                            indexing='ij')).flatten(1)
        rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + window - 1
        self.register_buffer('relative_position_index',
                             (rel[..., 0] * (2 * window - 1) + rel[..., 1]).flatten())
        self.scale = (dim // heads) ** -0.5

    def forward(self, x):
        n = self.window ** 2
        bias = self.relative_position_bias_table[self.relative_position_index]
        bias = bias.view(n, n, -1).permute(2, 0, 1).contiguous().unsqueeze(0)
        if not self.timm:
            return shifted_window_attention(x, self.qkv.weight, self.proj.weight, bias,
                                            self.window, self.num_heads, self.shift,
                                            qkv_bias=self.qkv.bias, proj_bias=self.proj.bias)
        b, h, w, c = x.shape
        win, shift = self.window, self.shift
        x = torch.roll(x, shifts=(-shift, -shift), dims=(1, 2)) if shift else x
        x = x.view(b, h // win, win, w // win, win, c).permute(0, 1, 3, 2, 4, 5)
        x = x.reshape(-1, n, c)
        q, k, v = self.qkv(x).reshape(x.size(0), n, 3, self.num_heads, -1).permute(
            2, 0, 3, 1, 4).unbind(0)
        attn = ((q * self.scale) @ k.transpose(-2, -1) + bias).softmax(-1)
        x = self.proj((attn @ v).transpose(1, 2).reshape(x.size(0), n, -1))
        x = x.view(b, h // win, w // win, win, win, c).permute(0, 1, 3, 2, 4, 5)
        x = x.reshape(b, h, w, c)
        return torch.roll(x, shifts=(shift, shift), dims=(1, 2)) if shift else x


class SwinBlock(nn.Module):
    def __init__(self, dim: int, heads: int, shift: int, timm: bool = False):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = ShiftedWindowAttention(dim, heads, shift=shift, timm=timm)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class PatchMerging(nn.Module):
    """torchvision's: four strided slices concatenated, a norm and a reduction."""

    def __init__(self, dim: int):
        super().__init__()
        self.norm, self.reduction = nn.LayerNorm(4 * dim), nn.Linear(4 * dim, 2 * dim, bias=False)

    def forward(self, x):
        x = torch.cat([x[..., 0::2, 0::2, :], x[..., 1::2, 0::2, :],
                       x[..., 0::2, 1::2, :], x[..., 1::2, 1::2, :]], -1)
        return self.reduction(self.norm(x))


class TinySwin(nn.Module):
    """Patch embedding, two shifted-window blocks, patch merging, one more block;
    torchvision's attention, or timm's with ``timm=True``."""

    def __init__(self, timm: bool = False):
        super().__init__()
        self.patch = nn.Conv2d(3, 16, 2, 2)
        self.stage1 = nn.Sequential(SwinBlock(16, 2, 0, timm), SwinBlock(16, 2, 1, timm))
        self.merge = PatchMerging(16)
        self.stage2 = SwinBlock(32, 4, 0, timm)
        self.norm, self.head = nn.LayerNorm(32), nn.Linear(32, 5)

    def forward(self, x):
        x = self.patch(x).permute(0, 2, 3, 1)
        x = self.stage2(self.merge(self.stage1(x)))
        return self.head(self.norm(x).mean((1, 2)))
