"""Multi-query attention (one key/value head under several query heads): the tracer marks
the key/value head's expand over the query heads as a repeat of one head, so
``gqa='query'`` keeps that head whole and prunes the query heads freely, ``gqa='kv'``
keeps the attention whole and says why; ``heads='width'`` prunes the same positions of
the one key/value head and of every query head, with RoPE or without.  Where one fused
projection computes the queries and the key/value head (GPTBigCode's ``c_attn``), that
head's channels are left out of the projection's group, always kept, and its query heads
prune."""
import warnings

import numpy as np
import pytest
import torch

from attention_models import Block, Encoder, FusedMQA, SeparateQKV
from helpers import Traced
from masked_vs_slim import sample_and_deploy
from razorlib.pruning import L1NormPruner
from razorlib.pruning.importance import ImportanceContext

TOKENS_IN = torch.randn(2, 6, 8)
MQA_CASES = {
    'repeat_kv': dict(),
    'repeat_kv rope': dict(rope=True),
    'sdpa repeat_kv': dict(sdpa=True),
    'sdpa enable_gqa': dict(sdpa=True, gqa_in_sdpa=True),
}
KV_WHOLE = "gqa='query' keeps the key/value head whole (multi-query attention: one " \
    'key/value head of 8 query heads)'


def _mqa_model(kv_heads: int = 1, **options):
    """Two blocks of 8 query heads of width 8 over ``kv_heads`` key/value heads."""
    torch.manual_seed(0)
    return Encoder(*(Block(SeparateQKV(heads=8, kv_heads=kv_heads, **options))
                     for _ in range(2))).eval()


def _pruner(model, **kwargs):
    torch.manual_seed(0)
    pruner = L1NormPruner(ratio=0.5, except_start_keys=('embed', ), **kwargs)
    pruner.prepare_from_supernet(model, TOKENS_IN)
    return pruner


def _messages(traced, name):
    return [reason.message for reason in traced.reasons(name)]


@pytest.mark.parametrize('meta', [True, False], ids=['meta', 'real'])
@pytest.mark.parametrize('case', sorted(MQA_CASES))
def test_gqa_query_frees_the_query_heads_of_one_kv_head(case, meta):
    traced = Traced(_mqa_model(**MQA_CASES[case]), TOKENS_IN, gqa='query', meta=meta)
    query = traced.group_of('blocks.0.attn.q_proj')
    assert query.prunable and query.num_channels == 8  # one class per query head
    assert 'blocks.0.attn.o_proj' in query.consumers
    for name in ('k_proj', 'v_proj'):
        assert not traced.group_of(f'blocks.0.attn.{name}').prunable
    assert KV_WHOLE in _messages(traced, 'blocks.0.attn.v_proj')
    assert traced.group_of('blocks.0.mlp.0').prunable


@pytest.mark.parametrize('case', sorted(MQA_CASES))
def test_gqa_query_prunes_query_heads_and_the_slim_model_computes_the_masked_one(case):
    model = _mqa_model(**MQA_CASES[case])
    with warnings.catch_warnings():
        warnings.simplefilter('error', UserWarning)
        pruner = _pruner(model, gqa='query')
    assert sorted(pruner.groups.prunable) == ['blocks.0.attn.q_proj', 'blocks.0.mlp.0',
                                              'blocks.1.attn.q_proj', 'blocks.1.mlp.0']
    slim = sample_and_deploy(pruner, model, TOKENS_IN)  # masked == slim, params exact
    for block in slim.blocks:
        attn = block.attn
        assert (attn.q_proj.out_features, attn.k_proj.out_features,
                attn.v_proj.out_features, attn.o_proj.in_features) == (32, 8, 8, 32)
        assert (attn.num_heads, attn.num_key_value_heads, attn.num_key_value_groups) == \
            (4, 1, 4)
        assert block.mlp[0].out_features == 32


@pytest.mark.parametrize('case', sorted(MQA_CASES))
def test_gqa_kv_keeps_the_attention_of_one_kv_head_whole_and_says_why(case):
    traced = Traced(_mqa_model(**MQA_CASES[case]), TOKENS_IN)
    assert not traced.group_of('blocks.0.attn.q_proj').prunable
    assert any("gqa='kv' prunes a key/value head with its query heads, which would remove "
               "the attention, so it stays whole; gqa='query' prunes the query heads" in m
               for m in _messages(traced, 'blocks.0.attn.q_proj'))
    assert traced.group_of('blocks.0.mlp.0').prunable


def test_a_broadcast_kv_head_pairs_like_a_repeated_one():
    """``q @ k^T`` with ``k`` of one head and no ``repeat_kv``: matmul broadcasts it."""
    class Broadcast(SeparateQKV):
        def forward(self, x):
            q, k, v = (proj(x).view(*x.shape[:-1], -1, self.head_dim).transpose(1, 2)
                       for proj in (self.q_proj, self.k_proj, self.v_proj))
            out = ((q @ k.transpose(-2, -1)) * self.scaling).softmax(-1) @ v
            return self.o_proj(out.transpose(1, 2).reshape(*x.shape[:-1], -1))

    torch.manual_seed(0)
    model = Encoder(Block(Broadcast(heads=8, kv_heads=1))).eval()
    slim = sample_and_deploy(_pruner(model, gqa='query'), model, TOKENS_IN)
    assert (slim.blocks[0].attn.q_proj.out_features, slim.blocks[0].attn.k_proj.out_features) \
        == (32, 8)


@pytest.mark.parametrize('case', sorted(MQA_CASES))
def test_head_width_prunes_the_positions_of_one_kv_head_and_its_query_heads(case):
    model = _mqa_model(**MQA_CASES[case])
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        pruner = _pruner(model, heads='width')
    group = pruner.groups.prunable['blocks.0.attn.v_proj']
    # head_dim positions, shared by q, k and v; RoPE pairs i with i + 4
    assert group.num_channels == (4 if MQA_CASES[case].get('rope') else 8)
    assert sorted(group.layers) == [f'blocks.0.attn.{p}_proj' for p in 'kqv']
    slim = sample_and_deploy(pruner, model, TOKENS_IN)
    for attn in (block.attn for block in slim.blocks):
        assert (attn.q_proj.out_features, attn.k_proj.out_features,
                attn.v_proj.out_features, attn.o_proj.in_features) == (32, 4, 4, 32)
        assert (attn.num_heads, attn.num_key_value_heads, attn.head_dim) == (8, 1, 4)


def _fused_model(sdpa: bool = False):
    """Two blocks of 8 query heads of width 8 and one key/value head, all from ``c_attn``."""
    torch.manual_seed(0)
    return Encoder(*(Block(FusedMQA(heads=8, sdpa=sdpa)) for _ in range(2))).eval()


@pytest.mark.parametrize('sdpa', [False, True], ids=['repeat_kv', 'sdpa'])
def test_a_fused_projection_keeps_its_kv_head_and_prunes_its_query_heads(sdpa):
    model = _fused_model(sdpa)
    group = Traced(model, TOKENS_IN, gqa='query').group_of('blocks.0.attn.c_attn')
    # 8 query heads of 8 channels; the key and value head (8 channels each) always kept
    assert (group.num_channels, group.width, len(group.kept), group.parts) == (8, 80, 2, [])
    assert 'keeps 16 of its 80 output channels whole: [kept] ' in str(group)
    assert [r.message for r in group.kept_reasons] == [KV_WHOLE]
    with warnings.catch_warnings():
        warnings.simplefilter('error', UserWarning)
        pruner = _pruner(model, gqa='query')
    assert sorted(pruner.groups.prunable) == ['blocks.0.attn.c_attn', 'blocks.0.mlp.0',
                                              'blocks.1.attn.c_attn', 'blocks.1.mlp.0']
    context = ImportanceContext.from_pruner(pruner)
    use = next(u for u in pruner._uses if (u.name, u.role) == ('blocks.0.attn.c_attn', 'out'))
    owner, position = context.locate(use)
    assert (owner[64:] == -1).all() and (owner[:64] >= 0).all()
    assert position[:64].tolist() == np.repeat(np.arange(8), 8).tolist()
    slim = sample_and_deploy(pruner, model, TOKENS_IN)  # masked == slim, params exact
    for attn in (block.attn for block in slim.blocks):
        assert (attn.c_attn.out_features, attn.c_proj.in_features) == (48, 32)
        assert (attn.num_heads, attn.embed_dim, attn.split_size, attn.kv_heads, attn.kv_dim,
                attn.num_key_value_groups) == (4, 32, 32, 1, 8, 4)


def test_a_fused_projection_frozen_for_another_reason_stays_frozen():
    traced = Traced(_fused_model(), TOKENS_IN, gqa='query',
                    except_start_keys=('blocks.0.attn.c_attn', ))
    frozen = traced.group_of('blocks.0.attn.c_attn')
    assert not frozen.prunable and (frozen.num_channels, len(frozen.kept)) == (10, 0)
    assert sorted(r.kind for r in frozen.frozen_reasons) == ['except-key', 'kept']
    assert traced.group_of('blocks.1.attn.c_attn').prunable


def test_gqa_kv_keeps_a_fused_projection_of_one_kv_head_whole_and_says_why():
    group = Traced(_fused_model(), TOKENS_IN).group_of('blocks.0.attn.c_attn')
    assert not group.prunable and not group.kept_reasons
    assert any("gqa='query' prunes the query heads" in r.message for r in group.frozen_reasons)


def test_a_mask_over_the_leader_keeps_the_kv_head_and_may_not_prune_it():
    pruner = _pruner(_fused_model(), gqa='query')
    heads = np.repeat(np.arange(8) < 4, 8)  # the first 4 query heads of 8 channels
    pruner.set_subnet({'blocks.0.attn.c_attn': np.r_[heads, np.ones(16, dtype=bool)]})
    assert pruner.current_subnet['blocks.0.attn.c_attn'].tolist() == [True] * 4 + [False] * 4
    config = pruner.export_subnet()
    kept = list(range(32)) + list(range(64, 80))
    assert list(config.kept('blocks.0.attn.c_attn', 'out').index) == kept
    assert list(config.kept('blocks.0.attn.c_proj', 'in').index) == list(range(32))
    assert {gid: keep.tolist() for gid, keep in
            pruner.subnet_from_channel_config(config).items()} == \
        {gid: keep.tolist() for gid, keep in pruner.current_subnet.items()}
    with pytest.raises(ValueError, match=r"space 'blocks.0.attn.c_attn': the mask prunes "
                       r"channel 70, which is always kept \(\[kept\] BmmBackward0: gqa='query' "
                       r'keeps the key/value head whole .*\); keep it'):
        pruner.set_subnet({'blocks.0.attn.c_attn': np.r_[heads, np.arange(16) != 6]})


@pytest.mark.parametrize('meta', [True, False], ids=['meta', 'real'])
@pytest.mark.parametrize('sdpa', [False, True], ids=['repeat_kv', 'sdpa'])
def test_one_query_head_left_over_the_kv_head_is_read_as_a_head(sdpa, meta):
    """A fused projection left with one query head (GPTBigCode's c_attn pruned so) views
    its queries with a size-1 head axis, which carries no channels, and torch.matmul
    merges it away; under gqa='query' the query is one head all the same: the key/value
    head stays whole, and so does the query head, a group of one (before, its 8
    positions were offered to pruning, and slicing c_attn refused them).  Real SDPA
    runs a fused kernel, on meta and with repeat_kv matrix products."""
    torch.manual_seed(0)
    model = Encoder(*(Block(FusedMQA(heads=1, sdpa=sdpa)) for _ in range(2))).eval()
    group = Traced(model, TOKENS_IN, gqa='query', meta=meta).group_of('blocks.0.attn.c_attn')
    assert (group.num_channels, group.width, group.prunable) == (3, 24, False)
    assert [r.message for r in group.frozen_reasons] == [
        "gqa='query' keeps the key/value head whole (multi-query attention: one key/value "
        'head of 1 query head)']
    pruner = _pruner(model, gqa='query')
    assert sorted(pruner.groups.prunable) == ['blocks.0.mlp.0', 'blocks.1.mlp.0']
    slim = sample_and_deploy(pruner, model, TOKENS_IN)
    assert [(b.attn.c_attn.out_features, b.mlp[0].out_features) for b in slim.blocks] == \
        [(24, 32)] * 2
