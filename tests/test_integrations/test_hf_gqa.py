"""Grouped-query attention in Hugging Face Llama-likes (4 query heads over 2 key/value
heads): by default a key/value head is pruned with its query heads; ``gqa='query'`` keeps
every key/value head and prunes the same query heads in each group, and the config, the
masked supernet and a reload all follow."""
import copy

import pytest
from hf_builders import HALF_ATTENTION, attention_widths, build, main_output, relative_error

import razorlib
from razorlib.integrations.transformers import hidden_size_keys, prune, save_pruned
from razorlib.pruning import L1NormPruner
from razorlib.utils import get_model_complexity

LLAMA_LIKES = ('llama', 'mistral', 'qwen2')
#: gqa -> block widths at ratio 0.5 (query, key, value, output's input) and query heads
#: per key/value head in the slim model
HALF = {'kv': (HALF_ATTENTION['llama'], 2), 'query': ((32, 32, 32, 32), 1)}


@pytest.mark.parametrize('gqa', sorted(HALF))
@pytest.mark.parametrize('implementation', ['eager', 'sdpa'])
@pytest.mark.parametrize('name', LLAMA_LIKES)
def test_masked_model_computes_and_counts_what_the_slim_model_does(name, implementation,
                                                                   gqa):
    model, inputs = build(name, attn_implementation=implementation)
    dense = main_output(model, inputs)
    pruner = L1NormPruner(ratio=0.5, except_start_keys=hidden_size_keys(model), gqa=gqa)
    pruner.prepare_from_supernet(model, inputs)
    spaces = pruner.groups.prunable
    attention = [gid for gid in spaces if '.self_attn.' in gid]
    if gqa == 'query':  # one space of 2 query heads, each one per key/value group
        assert attention == [f'model.layers.{i}.self_attn.q_proj' for i in range(2)]
        assert [spaces[gid].num_channels for gid in attention] == [2, 2]
        for proj in ('k_proj', 'v_proj'):
            reasons = pruner.groups.groups[f'model.layers.0.self_attn.{proj}'].frozen_reasons
            assert any("gqa='query' keeps key/value heads whole" in r.message for r in reasons)
    else:  # one space of 2 key/value heads, each with its 2 query heads
        assert [spaces[gid].num_channels for gid in attention] == [2, 2]
        assert sorted(spaces[attention[0]].layers) == [
            f'model.layers.0.self_attn.{p}_proj' for p in 'kqv']
    pruner.set_subnet(pruner.sample_subnet())
    masked = main_output(model, inputs)
    masked_params = get_model_complexity(model, inputs).params
    slim = pruner.deploy_subnet(copy.deepcopy(model), pruner.export_subnet())
    widths, groups = HALF[gqa]
    for i, layer in enumerate(slim.model.layers):
        assert attention_widths(slim, name, i) == widths
        assert layer.self_attn.num_key_value_groups == groups
    assert relative_error(main_output(slim, inputs), masked) <= 1e-4
    assert relative_error(masked, dense) > 1e-2
    assert masked_params == sum(p.numel() for p in slim.parameters())


@pytest.mark.parametrize('name', LLAMA_LIKES)
def test_config_says_fewer_query_heads_and_reloads(name, tmp_path):
    model, inputs = build(name)
    slim = prune(model, inputs, ratio=0.5, gqa='query')
    assert attention_widths(slim, name, 1) == HALF['query'][0]
    assert (slim.config.num_attention_heads, slim.config.num_key_value_heads) == (2, 2)
    assert save_pruned(slim, tmp_path).exact
    again = type(model).from_pretrained(tmp_path).eval()
    assert attention_widths(again, name, 1) == HALF['query'][0]
    assert again.model.layers[1].self_attn.num_key_value_groups == 1
    assert relative_error(main_output(again, inputs), main_output(slim, inputs)) <= 1e-6


def test_one_call_prune_takes_the_option():
    model, inputs = build('llama')
    slim = razorlib.prune(model, inputs, ratio=0.5, gqa='query')
    assert attention_widths(slim, 'llama', 0) == HALF['query'][0]
    assert slim.model.layers[0].mlp.up_proj.out_features == 64
    with pytest.raises(ValueError, match=r"gqa must be 'kv' .* or 'query' .*, got 'q'"):
        razorlib.prune(model, inputs, ratio=0.5, gqa='q')
