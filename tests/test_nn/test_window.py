"""razorlib.nn.WindowAttention: torchvision's Swin (V1 and V2) attention, computed the
same way, with whole heads that razorlib prunes.

torchvision does not import here, so stand-ins carry its class names, attributes and
state-dict keys, with a forward that computes Swin's attention another way (per-pair
offsets for the bias; for the shift mask, the edges a rolled position came around);
where torchvision imports, its own models are converted and checked too."""
import copy
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from masked_vs_slim import sample_and_deploy
from optional_deps import torchvision_or_skip

import razorlib
from razorlib.nn import WindowAttention, convert_window_attention
from razorlib.pruning import L1NormPruner, slim_model


def offsets(h: int, w: int) -> torch.Tensor:
    """``(n, n)``: the bias-table row of each pair of a window's positions."""
    pos = [(r, c) for r in range(h) for c in range(w)]
    return torch.tensor([[(ri - rj + h - 1) * (2 * w - 1) + (ci - cj + w - 1)
                          for rj, cj in pos] for ri, ci in pos])


def wrapped(ph: int, pw: int, sh: int, sw: int) -> torch.Tensor:
    """``(ph, pw)``: for each position of the rolled map, which edges it came around (0
    to 3); after the cyclic shift a position attends only to its own kind."""
    rows = (torch.arange(ph) >= ph - sh).long() if sh else torch.zeros(ph, dtype=torch.long)
    cols = (torch.arange(pw) >= pw - sw).long() if sw else torch.zeros(pw, dtype=torch.long)
    return 2 * rows[:, None] + cols[None, :]


class ShiftedWindowAttention(nn.Module):
    """torchvision's attributes and names; the forward computes Swin's attention."""

    def __init__(self, dim, window_size, shift_size, num_heads):
        super().__init__()
        self.window_size, self.shift_size, self.num_heads = window_size, shift_size, num_heads
        self.attention_dropout = self.dropout = 0.0
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        h, w = window_size
        self.relative_position_bias_table = nn.Parameter(
            torch.randn((2 * h - 1) * (2 * w - 1), num_heads) * 0.5)
        self.register_buffer('relative_position_index', offsets(h, w).flatten())

    def bias(self):
        n = self.window_size[0] * self.window_size[1]
        return self.relative_position_bias_table[self.relative_position_index].reshape(
            n, n, -1).permute(2, 0, 1)

    def logits(self, q, k):
        return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])

    def forward(self, x):
        b, height, width, c = x.shape
        (wh, ww), (sh, sw) = self.window_size, self.shift_size
        x = F.pad(x, (0, 0, 0, (ww - width % ww) % ww, 0, (wh - height % wh) % wh))
        ph, pw = x.shape[1:3]
        sh, sw = (sh if ph > wh else 0), (sw if pw > ww else 0)
        labels = wrapped(ph, pw, sh, sw)
        x = torch.roll(x, (-sh, -sw), (1, 2))
        out = torch.zeros(b, ph, pw, c)
        heads, d = self.num_heads, c // self.num_heads
        for r in range(0, ph, wh):
            for s in range(0, pw, ww):
                win = x[:, r:r + wh, s:s + ww].reshape(b, wh * ww, c)
                q, k, v = self.qkv(win).view(b, -1, 3, heads, d).permute(2, 0, 3, 1, 4)
                lab = labels[r:r + wh, s:s + ww].flatten()
                mask = (lab[:, None] != lab[None, :]) * -100.0 if (sh or sw) else 0.0
                attn = (self.logits(q, k) + self.bias() + mask).softmax(-1)
                y = (attn @ v).transpose(1, 2).reshape(b, wh * ww, c)
                out[:, r:r + wh, s:s + ww] = self.proj(y).view(b, wh, ww, c)
        return torch.roll(out, (sh, sw), (1, 2))[:, :height, :width]


class ShiftedWindowAttentionV2(ShiftedWindowAttention):
    """Swin V2: cosine logits times a learned scale, the bias from an MLP of log-spaced
    relative coordinates, the key's bias ignored."""

    def __init__(self, dim, window_size, shift_size, num_heads):
        super().__init__(dim, window_size, shift_size, num_heads)
        del self.relative_position_bias_table
        self.logit_scale = nn.Parameter(torch.rand(num_heads, 1, 1) + 1.5)
        self.cpb_mlp = nn.Sequential(nn.Linear(2, 512), nn.ReLU(inplace=True),
                                     nn.Linear(512, num_heads, bias=False))
        h, w = window_size
        grid = torch.tensor([[[i / (h - 1) * 8, j / (w - 1) * 8] for j in range(1 - w, w)]
                             for i in range(1 - h, h)])
        self.register_buffer('relative_coords_table',
                             (grid.sign() * (grid.abs() + 1).log2() / 3).unsqueeze(0))

    def bias(self):
        n = self.window_size[0] * self.window_size[1]
        table = self.cpb_mlp(self.relative_coords_table).reshape(-1, self.num_heads)
        return 16 * table[self.relative_position_index].reshape(n, n, -1).permute(
            2, 0, 1).sigmoid()

    def logits(self, q, k):
        c = q.shape[-1] * self.num_heads
        k = k - self.qkv.bias[c:2 * c].view(self.num_heads, 1, -1)  # the key bias, ignored
        cos = F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-2, -1)
        return cos * self.logit_scale.clamp(max=math.log(100.0)).exp()


KINDS = {'v1': ShiftedWindowAttention, 'v2': ShiftedWindowAttentionV2}


class Block(nn.Module):
    def __init__(self, kind, dim, heads, shift):
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(dim), KINDS[kind](dim, [2, 3], shift, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TinySwin(nn.Module):
    """A patch conv, a plain and a shifted block of 4 heads, a head; 5 x 7 patches, so
    the windows pad."""

    def __init__(self, kind):
        super().__init__()
        self.patch = nn.Conv2d(3, 16, 2, 2)
        self.blocks = nn.Sequential(Block(kind, 16, 4, [0, 0]), Block(kind, 16, 4, [1, 1]))
        self.head = nn.Linear(16, 5)

    def forward(self, x):
        return self.head(self.blocks(self.patch(x).permute(0, 2, 3, 1)).mean((1, 2)))


X = torch.randn(2, 3, 10, 14)


@pytest.mark.parametrize('kind', sorted(KINDS))
@pytest.mark.parametrize('shift', [[0, 0], [1, 1], [1, 2]], ids=str)
@pytest.mark.parametrize('size', [(4, 6), (5, 7)], ids=str)
def test_computes_what_the_torchvision_module_does(kind, shift, size):
    torch.manual_seed(0)
    source = KINDS[kind](16, [2, 3], list(shift), 4).eval()
    x = torch.randn(2, *size, 16)
    attn = WindowAttention.from_torchvision(source)
    assert attn.state_dict().keys() == source.state_dict().keys()
    torch.testing.assert_close(attn(x), source(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('kind', sorted(KINDS))
def test_the_copy_keeps_the_sources_dtype(kind):
    source = KINDS[kind](16, [2, 3], [1, 1], 4).double()
    attn = WindowAttention.from_torchvision(source)
    assert {p.dtype for p in attn.parameters()} == {torch.float64}
    assert attn(torch.randn(1, 5, 7, 16, dtype=torch.float64)).dtype == torch.float64


@pytest.mark.parametrize('kind', sorted(KINDS))
def test_converted_swin_loses_whole_heads(kind):
    torch.manual_seed(0)
    model = TinySwin(kind).eval()
    dense = model(X)
    assert convert_window_attention(model) is model
    assert all(type(b.attn) is WindowAttention for b in model.blocks)
    torch.testing.assert_close(model(X), dense, rtol=1e-5, atol=1e-5)
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, X)
    slim = sample_and_deploy(pruner, model, X)  # masked == slim, parameters counted
    for block in slim.blocks:
        attn = block.attn
        heads = attn.num_heads
        assert heads < 4 and attn.qkv.out_features == 3 * 4 * heads == 3 * attn.proj.in_features
        if kind == 'v1':
            assert attn.relative_position_bias_table.shape[1] == heads
        else:
            assert attn.cpb_mlp[2].out_features == attn.logit_scale.shape[0] == heads


def test_razorlib_prune_halves_the_heads():
    torch.manual_seed(0)
    model = convert_window_attention(TinySwin('v1').eval())
    slim = razorlib.prune(model, X, ratio=0.5)
    assert [b.attn.num_heads for b in slim.blocks] == [2, 2]
    assert slim(X).shape == (2, 5)


@pytest.mark.parametrize('heads', [3, 0])
@pytest.mark.parametrize('v2', [False, True])
def test_heads_that_do_not_split_dim_are_refused_at_construction(heads, v2):
    """They used to build, and fail the forward's reshape with a bare 'shape [...] is
    invalid' (or a 0-head module to build and run nothing)."""
    with pytest.raises(ValueError, match=f'WindowAttention: dim 16 is not divisible by '
                       f'num_heads {heads}$'):
        WindowAttention(16, [2, 2], [0, 0], num_heads=heads, v2=v2)


def test_a_module_of_another_layout_is_refused_and_nothing_converted():
    model = TinySwin('v1').eval()
    broken = copy.deepcopy(model.blocks[1].attn)
    del broken.relative_position_index
    model.blocks[1].attn = broken
    with pytest.raises(ValueError, match=r"blocks.1.attn \(ShiftedWindowAttention\) has no "
                       r"'relative_position_index'"):
        convert_window_attention(model)
    assert type(model.blocks[0].attn) is ShiftedWindowAttention


@pytest.mark.parametrize('name', ['swin_t', 'swin_s', 'swin_b',
                                  'swin_v2_t', 'swin_v2_s', 'swin_v2_b'])
def test_torchvision_swin_converts_prunes_and_reloads(name):
    """torchvision's six Swin models: converted with the same outputs, half of each
    attention's heads removed (masked == slim, counted exactly), and the channel config
    with the slim state dict restores a freshly built, converted model."""
    torchvision = torchvision_or_skip()
    torch.manual_seed(0)
    build = getattr(torchvision.models, name)
    model = build(num_classes=10).eval()
    x = torch.randn(1, 3, 96, 96)
    with torch.no_grad():
        dense = model(x)
        convert_window_attention(model)
        torch.testing.assert_close(model(x), dense, rtol=1e-4, atol=1e-4)
    heads = [m.num_heads for m in model.modules() if isinstance(m, WindowAttention)]
    depths = {'t': [2, 2, 6, 2], 's': [2, 2, 18, 2], 'b': [2, 2, 18, 2]}[name[-1]]
    width = 4 if name[-1] == 'b' else 3
    assert heads == [h for stage, d in enumerate(depths) for h in [width << stage] * d]
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, x)
    slim = sample_and_deploy(pruner, model, x)  # masked == slim, parameters counted
    kept = [m.num_heads for m in slim.modules() if isinstance(m, WindowAttention)]
    assert all(k < h for k, h in zip(kept, heads)), kept
    fresh = slim_model(convert_window_attention(build(num_classes=10)), pruner.export_subnet())
    fresh.load_state_dict(slim.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(fresh.eval()(x), slim(x))
