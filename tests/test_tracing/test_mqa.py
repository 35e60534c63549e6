"""Multi-query attention (one key/value head under several query heads) and
``gqa='query'``: the tracer cannot pair the query heads with a one-head axis, so they stay
whole; a pruner asked for ``gqa='query'`` says so, naming the attention, instead of
changing nothing silently, and the workaround it names prunes them."""
import warnings

import pytest
import torch

from attention_models import Block, Encoder, SeparateQKV
from helpers import Traced
from masked_vs_slim import sample_and_deploy
from razorlib.pruning import L1NormPruner
from razorlib.tracing.heads import single_kv_head_attention

TOKENS_IN = torch.randn(2, 6, 8)
MQA_CASES = {
    'repeat_kv': dict(),
    'repeat_kv rope': dict(rope=True),
    'sdpa repeat_kv': dict(sdpa=True),
    'sdpa enable_gqa': dict(sdpa=True, gqa_in_sdpa=True),
}
WARNING = (r"gqa='query' prunes no query heads of blocks.0.attn \(and 1 more\): its 8 query "
           r'heads share a single key/value head \(multi-query attention.*repeat k_proj and '
           r"v_proj to one key/value head per query head .* prune with gqa='kv'")


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


def test_multi_query_attentions_are_found_by_their_projections():
    assert single_kv_head_attention(_mqa_model()) == [('blocks.0.attn', 8), ('blocks.1.attn', 8)]
    assert single_kv_head_attention(_mqa_model(kv_heads=2)) == []
    assert single_kv_head_attention(_mqa_model(kv_heads=8)) == []


@pytest.mark.parametrize('meta', [True, False], ids=['meta', 'real'])
@pytest.mark.parametrize('case', sorted(MQA_CASES))
def test_query_heads_over_one_kv_head_stay_whole(case, meta):
    traced = Traced(_mqa_model(**MQA_CASES[case]), TOKENS_IN, gqa='query', meta=meta)
    for name in ('q_proj', 'k_proj'):
        assert not traced.group_of(f'blocks.0.attn.{name}').prunable
    assert traced.group_of('blocks.0.mlp.0').prunable
    if case == 'sdpa enable_gqa' and not meta:  # SDPA's fused kernel, read by its own rule
        reasons = traced.reasons('blocks.0.attn.q_proj')
        assert any('8 query heads over a single key/value head (multi-query attention)'
                   in r.message for r in reasons)


@pytest.mark.parametrize('case', sorted(MQA_CASES))
def test_gqa_query_warns_naming_the_attention_and_prunes_the_rest(case):
    model = _mqa_model(**MQA_CASES[case])
    with pytest.warns(UserWarning, match=WARNING) as record:
        pruner = _pruner(model, gqa='query')
    assert record[0].filename == __file__  # points at the caller, not into razorlib
    assert sorted(pruner.groups.prunable) == ['blocks.0.mlp.0', 'blocks.1.mlp.0']
    slim = sample_and_deploy(pruner, model, TOKENS_IN)  # masked == slim, params exact
    for block in slim.blocks:
        attn = block.attn
        assert (attn.q_proj.out_features, attn.k_proj.out_features,
                attn.v_proj.out_features, attn.o_proj.in_features) == (64, 8, 8, 64)
        assert block.mlp[0].out_features == 32


def test_no_warning_where_gqa_query_pairs_heads_or_was_not_asked():
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        grouped = _pruner(_mqa_model(kv_heads=2), gqa='query')
        assert grouped.groups.prunable['blocks.0.attn.q_proj'].num_channels == 4
        _pruner(_mqa_model(), gqa='kv')
        _pruner(_mqa_model(), gqa='query', heads='width')  # gqa does not apply there


@pytest.mark.parametrize('case', sorted(MQA_CASES))
def test_the_named_workaround_prunes_the_query_heads(case):
    """k_proj and v_proj repeated to one key/value head per query head compute the same
    function; gqa='kv' then prunes each query head with its copy."""
    model = _mqa_model(**MQA_CASES[case])
    with torch.no_grad():
        dense = model(TOKENS_IN)
    options = dict(MQA_CASES[case], heads=8, kv_heads=8)
    torch.manual_seed(0)
    repeated = Encoder(*(Block(SeparateQKV(**options)) for _ in range(2))).eval()
    state = {name: tensor.repeat(8, *([1] * (tensor.dim() - 1)))
             if '.k_proj.' in name or '.v_proj.' in name else tensor
             for name, tensor in model.state_dict().items()}
    repeated.load_state_dict(state)
    with torch.no_grad():
        assert torch.allclose(repeated(TOKENS_IN), dense, atol=1e-6)
    pruner = _pruner(repeated, gqa='kv')
    (group, ) = [group for group in pruner.groups.prunable.values()
                 if 'blocks.0.attn.k_proj' in group.layers]
    assert group.num_channels == 8 and 'blocks.0.attn.q_proj' in group.layers
    slim = sample_and_deploy(pruner, repeated, TOKENS_IN)
    for attn in (block.attn for block in slim.blocks):
        assert (attn.q_proj.out_features, attn.k_proj.out_features,
                attn.v_proj.out_features, attn.o_proj.in_features) == (32, 32, 32, 32)
        assert (attn.num_heads, attn.num_key_value_heads, attn.num_key_value_groups) == \
            (4, 4, 1)
