"""Whole attention heads: q/k/v/o pruned together, however the attention is written."""
import copy

import pytest
import torch
import torch.nn.functional as F

import razorlib
from attention_models import Block, Encoder, FusedQKV, SeparateQKV, TinySwin
from helpers import Traced
from razorlib.pruning import L1NormPruner
from razorlib.utils import get_model_complexity

TOKENS_IN = torch.randn(2, 6, 8)


def _prune_half(model, x, **kwargs):
    """Masked output, masked parameter count and the slim model at ratio 0.5."""
    torch.manual_seed(0)
    pruner = L1NormPruner(ratio=0.5, except_start_keys=('embed', ), **kwargs)
    pruner.prepare_from_supernet(model, x)
    pruner.set_subnet(pruner.sample_subnet())
    with torch.no_grad():
        masked = model(x)
    params = get_model_complexity(model, x).params
    slim = pruner.deploy_subnet(copy.deepcopy(model), pruner.export_subnet()).eval()
    with torch.no_grad():
        out = slim(x)
    assert torch.allclose(out, masked, rtol=1e-4, atol=1e-5)
    assert params == sum(p.numel() for p in slim.parameters())
    return pruner, slim


CASES = {
    'softmax(QK^T)V': dict(),
    'rope': dict(rope=True),
    'gqa repeat_kv': dict(kv_heads=2),
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
    assert any('outside its forward' in r.message for r in qkv.frozen_reasons)
    assert traced.group_of('stage2.mlp.0').prunable
    _, slim = _prune_half(model, x)
    assert [b.mlp[0].out_features for b in (*slim.stage1, slim.stage2)] == [16, 16, 32]
