"""Whole attention heads: q/k/v/o pruned together, however the attention is written."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import razorlib
from attention_models import Block, Encoder, FusedQKV, Rotary, SeparateQKV, TinySwin
from helpers import Traced
from masked_vs_slim import sample_and_deploy
from razorlib.pruning import L1NormPruner
from razorlib.tracing import trace
from razorlib.tracing.heads import query_groups

TOKENS_IN = torch.randn(2, 6, 8)


def _prune_half(model, x, **kwargs):
    """The pruner at ratio 0.5 and the slim model, checked against the masked one."""
    torch.manual_seed(0)
    pruner = L1NormPruner(ratio=0.5, except_start_keys=('embed', ), **kwargs)
    pruner.prepare_from_supernet(model, x)
    return pruner, sample_and_deploy(pruner, model, x)


CASES = {
    'softmax(QK^T)V': dict(),
    'rope': dict(rope=True),
    'gqa repeat_kv': dict(kv_heads=2),
    'gqa repeat_kv counted heads': dict(kv_heads=2, counted_heads=True),
    'sdpa': dict(sdpa=True),
    'sdpa gqa repeat_kv rope': dict(sdpa=True, kv_heads=2, rope=True),
    'sdpa enable_gqa': dict(sdpa=True, kv_heads=2, gqa_in_sdpa=True),
}


@pytest.mark.parametrize('case', sorted(CASES))
def test_separate_projections_lose_whole_heads_with_their_kv_heads(case):
    options = {'heads': 4, 'kv_heads': 4, **CASES[case]}
    model = Encoder(Block(SeparateQKV(**options)), Block(SeparateQKV(**options))).eval()
    traced = Traced(model, TOKENS_IN)
    group = traced.group_of('blocks.0.attn.q_proj')
    assert group.prunable and group.num_channels == options['kv_heads']
    assert sorted(group.layers) == ['blocks.0.attn.k_proj', 'blocks.0.attn.q_proj',
                                    'blocks.0.attn.v_proj']
    assert group.consumers == ['blocks.0.attn.o_proj']
    _, slim = _prune_half(model, TOKENS_IN)
    attn = slim.blocks[0].attn
    assert (attn.q_proj.out_features, attn.k_proj.out_features) == (16, options['kv_heads'] * 4)
    assert (attn.o_proj.in_features, attn.num_key_value_groups) == (16, 4 // options['kv_heads'])
    assert slim.blocks[0].mlp[0].out_features == 32


def test_fused_qkv_keeps_its_three_parts_alike_and_its_head_count_follows():
    model = Encoder(Block(FusedQKV()), Block(FusedQKV())).eval()
    group = Traced(model, TOKENS_IN).group_of('blocks.1.attn.qkv')
    assert group.prunable and (group.num_channels, group.width) == (4, 96)
    _, slim = _prune_half(model, TOKENS_IN)
    attn = slim.blocks[1].attn
    assert (attn.num_heads, attn.qkv.out_features, attn.proj.in_features) == (2, 48, 16)


def test_scaled_dot_product_attention_pairs_heads_and_contracts_head_dim():
    q, k, v = (torch.randn(1, 4, 3, 8, requires_grad=True) for _ in range(3))
    name = F.scaled_dot_product_attention(q, k, v).grad_fn.name()
    assert name == 'ScaledDotProductFlashAttentionForCpuBackward0'
    assert razorlib.tracing.RULES[name].kind == 'attention'


def test_swin_patterns_prune_their_mlps_and_explain_the_windowed_attention():
    model = TinySwin().eval()
    x = torch.randn(2, 3, 8, 8)
    traced = Traced(model, x)
    qkv = traced.group_of('stage1.0.attn.qkv')
    assert not qkv.prunable
    assert any('outside its forward' in r.message and  # torchvision's class name: a hint
               'razorlib.nn.convert_window_attention(model)' in r.message
               for r in qkv.frozen_reasons)
    assert traced.group_of('stage2.mlp.0').prunable
    _, slim = _prune_half(model, x)
    assert [b.mlp[0].out_features for b in (*slim.stage1, slim.stage2)] == [16, 16, 32]


def test_timm_window_attention_loses_whole_heads_with_its_bias_table_columns():
    model = TinySwin(timm=True).eval()
    x = torch.randn(2, 3, 8, 8)
    assert Traced(model, x).group_of('stage1.0.attn.qkv').prunable
    _, slim = _prune_half(model, x)  # masked == slim checked there
    attns = [b.attn for b in (*slim.stage1, slim.stage2)]
    assert [a.num_heads for a in attns] == [1, 1, 2]
    assert [a.qkv.out_features for a in attns] == [24, 24, 48]
    assert [a.relative_position_bias_table.shape[1] for a in attns] == [1, 1, 2]


GQA_CASES = {
    'repeat_kv': dict(),
    'repeat_kv counted heads': dict(counted_heads=True),
    'sdpa repeat_kv rope': dict(sdpa=True, rope=True),
    'sdpa enable_gqa': dict(sdpa=True, gqa_in_sdpa=True),
}


def _gqa_model(**options):
    """Two blocks of 8 query heads over 2 key/value heads (4 per group) of width 8."""
    return Encoder(*(Block(SeparateQKV(heads=8, kv_heads=2, **options))
                     for _ in range(2))).eval()


@pytest.mark.parametrize('meta', [True, False], ids=['meta', 'real'])
@pytest.mark.parametrize('case', sorted(GQA_CASES))
def test_gqa_query_binds_the_same_query_heads_in_every_kv_group(case, meta):
    # on real tensors SDPA runs its fused kernel, on meta its math decomposition
    traced = Traced(_gqa_model(**GQA_CASES[case]), TOKENS_IN, gqa='query', meta=meta)
    group = traced.group_of('blocks.0.attn.q_proj')
    assert group.prunable and (group.num_channels, group.width) == (4, 64)
    assert group.layers == ['blocks.0.attn.q_proj']
    assert group.consumers == ['blocks.0.attn.o_proj']
    heads = traced.classes('blocks.0.attn.q_proj').reshape(8, 8)
    assert (heads == heads[:, :1]).all()  # whole heads
    assert (heads[:4, 0] == heads[4:, 0]).all()  # head i of group 0 is head i of group 1
    assert len(set(heads[:4, 0].tolist())) == 4
    assert (traced.classes('blocks.0.attn.o_proj', 'in') == heads.ravel()).all()
    for name in ('blocks.0.attn.k_proj', 'blocks.0.attn.v_proj'):
        kv = traced.group_of(name)
        assert kv.layers == [name] and not kv.prunable
        assert any("gqa='query' keeps key/value heads whole (2 key/value heads of 4 query "
                   'heads each)' in r.message for r in kv.frozen_reasons)


@pytest.mark.parametrize('case', sorted(GQA_CASES))
def test_gqa_query_slim_model_computes_what_the_masked_one_does(case):
    model = _gqa_model(**GQA_CASES[case])
    with torch.no_grad():
        dense = model(TOKENS_IN)
    _, slim = _prune_half(model, TOKENS_IN, gqa='query')
    with torch.no_grad():
        assert float((slim(TOKENS_IN) - dense).norm() / dense.norm()) > 1e-2  # heads gone
    for attn in (block.attn for block in slim.blocks):
        assert (attn.q_proj.out_features, attn.o_proj.in_features) == (32, 32)
        assert (attn.k_proj.out_features, attn.v_proj.out_features) == (16, 16)
        assert (attn.num_heads, attn.num_key_value_heads, attn.num_key_value_groups) == \
            (4, 2, 2)


def test_gqa_query_keeps_heads_whole_where_every_query_head_has_its_own_kv_head():
    model = Encoder(Block(SeparateQKV()), Block(SeparateQKV(sdpa=True))).eval()
    for i in range(2):
        group = Traced(model, TOKENS_IN, gqa='query').group_of(f'blocks.{i}.attn.k_proj')
        assert group.prunable and group.num_channels == 4
        assert sorted(group.layers) == [f'blocks.{i}.attn.{p}_proj' for p in 'kqv']


def test_query_groups_find_equal_groups_only():
    side, kv, grid = query_groups(np.array([5, 5, 6, 6]), np.arange(4))
    assert (side, kv.tolist(), grid.tolist()) == (1, [5, 6], [[0, 1], [2, 3]])
    assert query_groups(np.arange(3), np.array([5, 5, 6])) is None  # uneven groups
    assert query_groups(np.arange(4), np.arange(4, 8)) is None  # one kv head per head


WIDTH_CASES = {
    'softmax(QK^T)V': dict(),
    'sdpa': dict(sdpa=True),
    'rope buffers': dict(rope=True),
    'rotary module': dict(rotary=True),
    'gqa repeat_kv rotary': dict(kv_heads=2, rotary=True),
    'sdpa enable_gqa rope': dict(sdpa=True, kv_heads=2, gqa_in_sdpa=True, rope=True),
}


def _width_model(rotary=False, **options):
    """Two blocks of 4 heads of 16 (a shared :class:`Rotary`, as Hugging Face's)."""
    shared = {'rotary': Rotary(16)} if rotary else {}
    return Encoder(*(Block(SeparateQKV(**{'head_dim': 16, **options, **shared}))
                     for _ in range(2))).eval()


def _kept_positions(pruner, name: str, heads: int) -> np.ndarray:
    """The head_dim positions each head of ``name`` keeps, one row per head."""
    index = np.array(pruner.export_subnet().modules[name]['out'].index)
    return (index % 16).reshape(heads, -1)


@pytest.mark.parametrize('case', sorted(WIDTH_CASES))
def test_heads_width_halves_head_dim_and_keeps_the_head_counts(case):
    options = {'kv_heads': 4, **WIDTH_CASES[case]}
    model = _width_model(**options)
    pruner, slim = _prune_half(model, TOKENS_IN, heads='width')
    group = pruner.groups.groups[pruner.get_space_id('blocks.0.attn.q_proj')]
    assert sorted(group.layers)[:3] == [f'blocks.0.attn.{p}_proj' for p in 'kqv']
    kv = options['kv_heads']
    for attn in (block.attn for block in slim.blocks):
        assert (attn.q_proj.out_features, attn.k_proj.out_features, attn.v_proj.out_features,
                attn.o_proj.in_features) == (32, kv * 8, kv * 8, 32)
        assert (attn.head_dim, attn.num_heads, attn.num_key_value_heads,
                attn.num_key_value_groups, attn.scaling) == (8, 4, kv, 4 // kv, 0.25)
    kept = _kept_positions(pruner, 'blocks.0.attn.q_proj', 4)
    assert (kept == kept[:1]).all()  # every head keeps the same positions
    if options.get('rope') or options.get('rotary'):  # RoPE pairs i and i + d/2
        assert set(kept[0].tolist()) == {(i + 8) % 16 for i in kept[0].tolist()}
    if options.get('rotary'):  # one rotary module for both blocks: its kept frequencies
        assert slim.blocks[0].attn.rotary.inv_freq.tolist() == \
            model.blocks[0].attn.rotary.inv_freq[kept[0][:4]].tolist()


def test_heads_width_freezes_code_that_scales_by_its_head_dim():
    for options in (dict(), dict(sdpa=True)):
        model = _width_model(scale_from_head_dim=True, **options)
        pruner = L1NormPruner(ratio=0.5, heads='width')
        pruner.prepare_from_supernet(model, TOKENS_IN)
        group = pruner.groups.groups['blocks.0.attn.v_proj']
        assert not group.prunable
        assert any("heads='width': the slim model computes other outputs than the masked "
                   'one (relative error' in r.message for r in group.frozen_reasons)


def test_heads_width_sdpa_without_scale_names_the_scale():
    traced = Traced(_width_model(sdpa=True, scale_from_head_dim=True), TOKENS_IN,
                    heads='width', meta=False)  # the fused kernel saves its scale
    assert any('no scale= given' in r.message
               for r in traced.reasons('blocks.0.attn.q_proj'))


@pytest.mark.parametrize('option, value, message', [
    ('gqa', 'heads', r"gqa must be 'kv' .* or 'query' .*, got 'heads'"),
    ('heads', 'dim', r"heads must be 'whole' .* or 'width' .*, got 'dim'"),
])
def test_a_bad_attention_option_names_the_option_and_its_values(option, value, message):
    with pytest.raises(ValueError, match=message):
        L1NormPruner(ratio=0.5, **{option: value})
    with pytest.raises(ValueError, match=message):
        trace(_gqa_model(), TOKENS_IN, **{option: value})
