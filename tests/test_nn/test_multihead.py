"""nn.MultiheadAttention converted to separate q/k/v projections: the same outputs and
weights as torch's module, and whole heads pruned by razorlib.prune."""

import re

import pytest
import torch
import torch.nn as nn
from doctest_helpers import assert_examples_pass, modules_of
from masked_vs_slim import sample_and_deploy
from optional_deps import torchvision_or_skip

import razorlib
import razorlib.nn
from razorlib.nn import SeparateProjectionAttention, split_multihead_attention
from razorlib.pruning import L1NormPruner, slim_model
from razorlib.tracing import build_groups, trace

DIM, HEADS, BATCH, L, S = 16, 4, 2, 5, 7


def _causal(n=L):
    return torch.ones(n, n, dtype=torch.bool).triu(1)


def _padding():
    mask = torch.zeros(BATCH, L, dtype=torch.bool)
    mask[0, -2:] = True
    return mask


# name: (MultiheadAttention kwargs, inputs (query, key, value), forward kwargs)
CASES = {
    'batch_first': (dict(batch_first=True), lambda: (torch.randn(BATCH, L, DIM), ) * 3, {}),
    'sequence_first': (dict(), lambda: (torch.randn(L, BATCH, DIM), ) * 3, {}),
    'unbatched': (dict(batch_first=True), lambda: (torch.randn(L, DIM), ) * 3,
                  dict(key_padding_mask=torch.tensor([False] * (L - 1) + [True]))),
    'key_padding_mask': (dict(batch_first=True), lambda: (torch.randn(BATCH, L, DIM), ) * 3,
                         dict(key_padding_mask=_padding())),
    'bool attn_mask': (dict(), lambda: (torch.randn(L, BATCH, DIM), ) * 3,
                       dict(attn_mask=_causal())),
    'float attn_mask': (dict(batch_first=True), lambda: (torch.randn(BATCH, L, DIM), ) * 3,
                        dict(attn_mask=torch.randn(L, L))),
    'per-head attn_mask': (dict(batch_first=True), lambda: (torch.randn(BATCH, L, DIM), ) * 3,
                           dict(attn_mask=torch.randn(BATCH * HEADS, L, L))),
    'both masks': (dict(batch_first=True), lambda: (torch.randn(BATCH, L, DIM), ) * 3,
                   dict(attn_mask=_causal(), key_padding_mask=_padding())),
    'is_causal': (dict(batch_first=True), lambda: (torch.randn(BATCH, L, DIM), ) * 3,
                  dict(attn_mask=_causal(), is_causal=True)),
    'kdim vdim': (dict(kdim=12, vdim=10, batch_first=True),
                  lambda: (torch.randn(BATCH, L, DIM), torch.randn(BATCH, S, 12),
                           torch.randn(BATCH, S, 10)), {}),
    'cross-attention without bias': (dict(bias=False), lambda: (
        torch.randn(L, BATCH, DIM), torch.randn(S, BATCH, DIM), torch.randn(S, BATCH, DIM)),
        {}),
}
WEIGHTS = {
    'no weights': dict(need_weights=False),
    'averaged weights': dict(need_weights=True),
    'per-head weights': dict(need_weights=True, average_attn_weights=False),
}


def _pair(options, training=False):
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(DIM, HEADS, **options).train(training)
    with torch.no_grad():  # nonzero biases, so that a misplaced bias shows
        for name, param in mha.named_parameters():
            if 'bias' in name:
                param.normal_()
    return mha, SeparateProjectionAttention.from_multihead(mha)


@pytest.mark.parametrize('weights', sorted(WEIGHTS))
@pytest.mark.parametrize('case', sorted(CASES))
def test_converted_module_computes_what_multihead_attention_does(case, weights):
    options, make_inputs, call = CASES[case]
    mha, attn = _pair(options)
    inputs = make_inputs()
    with torch.no_grad():  # torch's fused fast path where it applies
        expected = mha(*inputs, **call, **WEIGHTS[weights])
        out = attn(*inputs, **call, **WEIGHTS[weights])
    torch.testing.assert_close(out[0], expected[0], rtol=0, atol=1e-6)
    if expected[1] is None:
        assert out[1] is None
    else:
        torch.testing.assert_close(out[1], expected[1], rtol=0, atol=1e-6)


@pytest.mark.parametrize('weights', sorted(WEIGHTS))
def test_dropout_in_training_draws_what_multihead_attention_draws(weights):
    mha, attn = _pair(dict(dropout=0.5, batch_first=True), training=True)
    x = torch.randn(BATCH, L, DIM)
    torch.manual_seed(1)
    expected = mha(x, x, x, **WEIGHTS[weights])[0]
    torch.manual_seed(1)
    out = attn(x, x, x, **WEIGHTS[weights])[0]
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-6)
    assert not torch.allclose(out, attn.eval()(x, x, x)[0])  # dropout did drop


def test_is_causal_needs_a_mask_as_in_torch():
    _, attn = _pair(dict())
    x = torch.randn(L, BATCH, DIM)
    with pytest.raises(RuntimeError, match='Need attn_mask'):
        attn(x, x, x, is_causal=True)


@pytest.mark.parametrize('mask', ['attn_mask', 'key_padding_mask'])
def test_a_byte_mask_is_refused_as_in_torch(mask):
    # a legacy uint8 mask (1: not allowed) is no additive bias: torch refuses it
    original, attn = _pair(dict())
    x = torch.randn(L, BATCH, DIM)
    byte = {'attn_mask': torch.ones(L, L, dtype=torch.uint8).triu(1),
            'key_padding_mask': torch.zeros(BATCH, L, dtype=torch.uint8)}[mask]
    with pytest.raises(AssertionError, match='only bool and floating types'):
        original(x, x, x, **{mask: byte})
    with pytest.raises(TypeError, match='attention masks must be bool .* or floating point'):
        attn(x, x, x, **{mask: byte})


@pytest.mark.parametrize('heads', [3, 0])
def test_heads_that_do_not_split_embed_dim_are_refused_naming_the_module(heads):
    with pytest.raises(ValueError, match=f'SeparateProjectionAttention: embed_dim 16 is not '
                       f'divisible by num_heads {heads}$'):
        SeparateProjectionAttention(DIM, heads)


def test_a_per_head_mask_for_the_heads_before_pruning_is_refused_naming_it():
    """A 3-D attn_mask holds a row per head of each sequence: the one made for the four heads
    of the module before pruning failed a view of the slim module's two heads with torch's
    bare 'shape [...] is invalid' error."""
    _, attn = _pair(dict(batch_first=True))
    attn.q_proj, attn.k_proj, attn.v_proj = (nn.Linear(DIM, DIM // 2) for _ in 'qkv')
    attn.out_proj, attn.num_heads = nn.Linear(DIM // 2, DIM), HEADS // 2  # as slicing does
    x, kept = torch.randn(BATCH, L, DIM), torch.randn(BATCH * HEADS // 2, L, L)
    assert attn(x, x, x, attn_mask=kept)[0].shape == (BATCH, L, DIM)
    with pytest.raises(ValueError, match=re.escape(
            'SeparateProjectionAttention: attn_mask must be (L, S) = (5, 5) or, per head, '
            '(4, 5, 5) (rows for its 2 heads, those it keeps once pruned), got (8, 5, 5)')):
        attn(x, x, x, attn_mask=torch.randn(BATCH * HEADS, L, L))


@pytest.mark.parametrize('query, mask, message', [
    ((BATCH, L, DIM), dict(attn_mask=(L, S)), r'attn_mask must be \(L, S\) = \(5, 5\) or, per '
     r'head, \(8, 5, 5\) .*, got \(5, 7\)'),
    ((BATCH, L, DIM), dict(key_padding_mask=(BATCH, S)),
     r'key_padding_mask must be \(2, 5\) \(batch, S\), got \(2, 7\)'),
    ((L, DIM), dict(key_padding_mask=(BATCH, L)),
     r'key_padding_mask must be \(5,\) \(batch, S\), got \(2, 5\)'),
    ((L, DIM), dict(attn_mask=(BATCH * HEADS, L, L)),
     r'attn_mask must be .* or, per head, \(4, 5, 5\) .*, got \(8, 5, 5\)'),
], ids=['2-D attn_mask', 'key_padding_mask', 'unbatched key_padding_mask',
        'unbatched 3-D attn_mask'])
def test_a_mask_of_another_shape_is_refused_naming_it(query, mask, message):
    _, attn = _pair(dict(batch_first=True))
    x = torch.randn(*query)
    masks = {name: torch.zeros(shape, dtype=torch.bool) for name, shape in mask.items()}
    with pytest.raises(ValueError, match='SeparateProjectionAttention: ' + message):
        attn(x, x, x, **masks)


class Holder(nn.Module):
    """One attention shared by two places, another in a list."""

    def __init__(self, **options):
        super().__init__()
        self.attn = nn.MultiheadAttention(DIM, HEADS, **options)
        self.same = self.attn
        self.others = nn.ModuleList([nn.MultiheadAttention(DIM, 2)])


def test_conversion_keeps_weights_dtype_mode_grad_flags_and_sharing():
    model = Holder(kdim=12, vdim=10).double().train()
    model.attn.k_proj_weight.requires_grad_(False)
    q, k, v = (torch.randn(L, BATCH, d, dtype=torch.float64) for d in (DIM, 12, 10))
    expected = model.attn(q, k, v)
    assert split_multihead_attention(model) is model
    attn = model.attn
    assert isinstance(attn, SeparateProjectionAttention) and model.same is attn
    assert isinstance(model.others[0], SeparateProjectionAttention)
    assert attn.training and attn.q_proj.weight.dtype == torch.float64
    assert (attn.embed_dim, attn.kdim, attn.vdim, attn.num_heads, attn.head_dim) == \
        (DIM, 12, 10, HEADS, DIM // HEADS)
    assert not attn.k_proj.weight.requires_grad and attn.q_proj.weight.requires_grad
    for got, want in zip(attn(q, k, v), expected):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize('option, text', [
    (dict(add_bias_kv=True), r'^others\.1 \(MultiheadAttention\) has add_bias_kv=True'),
    (dict(add_zero_attn=True), r'^others\.1 \(MultiheadAttention\) has add_zero_attn=True'),
])
def test_conversion_refuses_what_it_cannot_express_and_changes_nothing(option, text):
    model = Holder()
    model.others.append(nn.MultiheadAttention(DIM, 2, **option))
    keys = list(model.state_dict())
    with pytest.raises(ValueError, match=text):
        split_multihead_attention(model)
    assert all(type(m) is nn.MultiheadAttention for m in (model.attn, *model.others))
    assert list(model.state_dict()) == keys


def test_conversion_refuses_a_subclass_with_its_own_forward_and_a_bare_module():
    class Custom(nn.MultiheadAttention):
        def forward(self, *args, **kwargs):
            return super().forward(*args, **kwargs)

    model = nn.Sequential(nn.Linear(DIM, DIM), Custom(DIM, HEADS))
    with pytest.raises(ValueError, match=r'^1 \(Custom\) has a forward of its own, which '
                                         r'split_multihead_attention cannot convert'):
        split_multihead_attention(model)
    with pytest.raises(ValueError, match=r'^cannot convert a Custom \(nn.MultiheadAttention\) '
                                         r'with a forward of its own$'):
        SeparateProjectionAttention.from_multihead(model[1])
    with pytest.raises(ValueError, match='the model itself is an nn.MultiheadAttention'):
        split_multihead_attention(nn.MultiheadAttention(DIM, HEADS))


def test_torch_transformer_encoder_runs_converted():
    """nn.TransformerEncoder's fused paths read the packed projection: they are left."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(DIM, HEADS, 32, dropout=0.0, batch_first=True)
    model = nn.TransformerEncoder(layer, 2).eval()
    x, padding = torch.randn(BATCH, L, DIM), _padding()
    with torch.no_grad():
        expected = [model(x), model(x, src_key_padding_mask=padding)]
        split_multihead_attention(model)
        out = [model(x), model(x, src_key_padding_mask=padding)]
    assert isinstance(model.layers[1].self_attn, SeparateProjectionAttention)
    torch.testing.assert_close(out[0], expected[0], rtol=0, atol=1e-5)
    kept = ~padding  # torch's nested path returns zeros at padded positions
    torch.testing.assert_close(out[1][kept], expected[1][kept], rtol=0, atol=1e-5)


class EncoderBlock(nn.Module):
    """torchvision's: ``ln_1 -> self_attention -> dropout -> + x``, then ln_2 + MLP."""

    def __init__(self, call: dict, batch_first: bool = True):
        super().__init__()
        self.call, self.batch_first = call, batch_first
        self.ln_1 = nn.LayerNorm(32)
        self.self_attention = nn.MultiheadAttention(32, 4, batch_first=batch_first)
        self.dropout = nn.Dropout(0.0)
        self.ln_2 = nn.LayerNorm(32)
        self.mlp = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32))

    def forward(self, x):
        y = self.ln_1(x) if self.batch_first else self.ln_1(x).transpose(0, 1)
        y, _ = self.self_attention(y, y, y, **self.call)
        x = self.dropout(y if self.batch_first else y.transpose(0, 1)) + x
        return x + self.mlp(self.ln_2(x))


class TinyViT(nn.Module):
    """torchvision's ViT cut down: patch conv, class token, position embedding, two
    encoder blocks, LayerNorm, head on the class token."""

    def __init__(self, call: dict = None, batch_first: bool = True):
        super().__init__()
        call = dict(need_weights=False) if call is None else call
        self.conv_proj = nn.Conv2d(3, 32, 4, 4)
        self.class_token = nn.Parameter(torch.randn(1, 1, 32) * 0.02)
        self.pos_embedding = nn.Parameter(torch.randn(1, 5, 32) * 0.02)
        self.layers = nn.Sequential(*(EncoderBlock(call, batch_first) for _ in range(2)))
        self.ln = nn.LayerNorm(32)
        self.heads = nn.Linear(32, 10)

    def forward(self, x):
        x = self.conv_proj(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.class_token.expand(x.shape[0], -1, -1), x], 1) + self.pos_embedding
        return self.heads(self.ln(self.layers(x))[:, 0])


IMAGES = torch.randn(2, 3, 8, 8)
VITS = {  # torchvision's call, the explicit softmax path, sequence-first tensors
    'sdpa': dict(),
    'softmax': dict(call=dict(average_attn_weights=False)),
    'sequence first': dict(batch_first=False),
}


@pytest.mark.parametrize('case', sorted(VITS))
def test_converted_vit_loses_half_its_heads_in_every_block(case):
    torch.manual_seed(0)
    model = TinyViT(**VITS[case]).eval()
    with torch.no_grad():
        dense = model(IMAGES)
        split_multihead_attention(model)
        torch.testing.assert_close(model(IMAGES), dense, rtol=0, atol=1e-6)
    slim = razorlib.prune(model, IMAGES, ratio=0.5)
    for block in slim.layers:
        attn = block.self_attention
        assert attn.num_heads == 2 and attn.head_dim == 8
        assert [p.out_features for p in (attn.q_proj, attn.k_proj, attn.v_proj)] == [16] * 3
        assert attn.out_proj.in_features == 16
    with torch.no_grad():
        assert slim(IMAGES).shape == (2, 10)


@pytest.mark.parametrize('case', sorted(VITS))
def test_converted_vit_masked_equals_slim_and_counts_exactly(case):
    torch.manual_seed(0)
    model = split_multihead_attention(TinyViT(**VITS[case]).eval())
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, IMAGES)
    heads = [pruner.groups.prunable[f'layers.{i}.self_attention.v_proj'] for i in range(2)]
    assert [(g.num_channels, sorted(g.layers)) for g in heads] == [
        (4, [f'layers.{i}.self_attention.{p}_proj' for p in 'kqv']) for i in range(2)]
    slim = sample_and_deploy(pruner, model, IMAGES)
    assert [b.self_attention.num_heads for b in slim.layers] == [2, 2]


def test_head_averaged_weights_keep_the_heads_whole():
    """nn.MultiheadAttention's default returns weights averaged over the heads: a mean
    over the heads, which the slim model would take over fewer of them."""
    model = split_multihead_attention(TinyViT(call={}).eval())
    groups = build_groups(trace(model, IMAGES))
    assert 'layers.0.self_attention.v_proj' not in groups.prunable
    assert 'layers.0.mlp.0' in groups.prunable


def test_unconverted_vit_says_how_to_prune_its_heads():
    groups = build_groups(trace(TinyViT().eval(), IMAGES))
    reasons = [r.message for g in groups.groups.values() if 'conv_proj' in g.layers
               for r in g.frozen_reasons]
    assert any('layers.0.self_attention is an nn.MultiheadAttention' in r and
               'razorlib.nn.split_multihead_attention(model)' in r for r in reasons)


def test_torchvision_vit_b_16_converts_prunes_and_reloads():
    """torchvision's own ViT-B/16 (where torchvision imports): converted with the same
    outputs, half of each block's heads and MLP channels removed, masked == slim, and
    the channel config with the slim state dict restores a fresh converted model."""
    torchvision = torchvision_or_skip()
    torch.manual_seed(0)
    model = torchvision.models.vit_b_16(num_classes=10).eval()
    nn.init.normal_(model.heads.head.weight, std=0.02)  # torchvision zeroes it: outputs 0
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        dense = model(x)
        split_multihead_attention(model)
        torch.testing.assert_close(model(x), dense, rtol=1e-4, atol=1e-4)
    pruner = L1NormPruner(ratio=0.5)
    pruner.prepare_from_supernet(model, x)
    values = [n for n in pruner.groups.prunable if n.endswith('self_attention.v_proj')]
    assert len(values) == 12
    slim = sample_and_deploy(pruner, model, x)
    blocks = list(slim.encoder.layers)
    assert all(b.self_attention.num_heads < 12 for b in blocks)
    assert all(b.mlp[0].out_features < 3072 for b in blocks)
    fresh = slim_model(split_multihead_attention(torchvision.models.vit_b_16(num_classes=10)),
                       pruner.export_subnet())
    fresh.load_state_dict(slim.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(fresh.eval()(x), slim(x))


@pytest.mark.parametrize('name', modules_of(razorlib.nn))
def test_docstring_examples(name):
    assert_examples_pass(name)
