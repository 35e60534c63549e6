"""Multi-query attention in Hugging Face Llama-likes and Gemma (4 query heads over one
key/value head): ``gqa='query'`` keeps the key/value head and prunes query heads, and the config,
the masked supernet and a reload all follow; by default the attention stays whole;
``heads='width'`` prunes the same positions of every head, RoPE pairing them."""
import copy
import warnings

import pytest
import torch
from hf_builders import attention_widths, build, main_output, relative_error

import razorlib
from razorlib.integrations.transformers import hidden_size_keys, save_pruned
from razorlib.pruning import L1NormPruner
from razorlib.utils import get_model_complexity

transformers = pytest.importorskip('transformers')

LLAMA_LIKES = ('llama', 'mistral', 'qwen2')


@pytest.mark.parametrize('implementation', ['eager', 'sdpa'])
@pytest.mark.parametrize('name', LLAMA_LIKES)
def test_gqa_query_prunes_query_heads_over_one_kv_head_and_reloads(name, implementation,
                                                                   tmp_path):
    model, inputs = build(name, num_key_value_heads=1, attn_implementation=implementation)
    with warnings.catch_warnings():
        warnings.simplefilter('error', UserWarning)
        slim = razorlib.prune(model, inputs, ratio=0.5, gqa='query')
    for i in range(2):
        assert attention_widths(slim, name, i) == (32, 16, 16, 32)
        assert slim.model.layers[i].self_attn.num_key_value_groups == 2
        assert slim.model.layers[i].mlp.up_proj.out_features == 64
    assert (slim.config.num_attention_heads, slim.config.num_key_value_heads) == (2, 1)
    assert save_pruned(slim, tmp_path).exact
    again = type(model).from_pretrained(tmp_path, attn_implementation=implementation).eval()
    assert attention_widths(again, name, 1) == (32, 16, 16, 32)
    assert relative_error(main_output(again, inputs), main_output(slim, inputs)) <= 1e-6


def test_the_masked_model_computes_what_the_slim_model_does():
    model, inputs = build('llama', num_key_value_heads=1)
    dense = main_output(model, inputs)
    pruner = L1NormPruner(ratio=0.5, except_start_keys=hidden_size_keys(model), gqa='query')
    pruner.prepare_from_supernet(model, inputs)
    spaces = pruner.groups.prunable
    assert sorted(spaces) == [f'model.layers.{i}.{layer}' for i in range(2)
                              for layer in ('mlp.up_proj', 'self_attn.q_proj')]
    assert spaces['model.layers.0.self_attn.q_proj'].num_channels == 4  # query heads
    torch.manual_seed(0)
    pruner.set_subnet(pruner.sample_subnet())
    masked = main_output(model, inputs)
    params = get_model_complexity(model, inputs).params
    slim = pruner.deploy_subnet(copy.deepcopy(model), pruner.export_subnet())
    assert relative_error(main_output(slim, inputs), masked) <= 1e-4
    assert relative_error(masked, dense) > 1e-2
    assert params == sum(p.numel() for p in slim.parameters())


def test_gqa_kv_keeps_the_attention_and_says_why():
    model, inputs = build('llama', num_key_value_heads=1)
    pruner = L1NormPruner(ratio=0.5, except_start_keys=hidden_size_keys(model))
    pruner.prepare_from_supernet(model, inputs)
    assert sorted(pruner.groups.prunable) == [f'model.layers.{i}.mlp.up_proj' for i in range(2)]
    reasons = pruner.groups.groups['model.layers.0.self_attn.q_proj'].frozen_reasons
    assert any("gqa='query' prunes the query heads" in r.message for r in reasons)
    # the one warning gives the cause q, k and v share, not the RoPE product it froze
    with pytest.warns(UserWarning, match=r"left whole in 2 module\(s\), .*multi-query "
                      r"attention.*gqa='query' prunes the query heads"):
        razorlib.prune(build('llama', num_key_value_heads=1)[0], inputs, ratio=0.5)


@pytest.mark.parametrize('implementation', ['eager', 'sdpa'])
def test_head_width_prunes_the_positions_of_one_kv_head_and_its_query_heads(implementation):
    model, inputs = build('llama', num_key_value_heads=1, attn_implementation=implementation)
    pruner = L1NormPruner(ratio=0.5, except_start_keys=hidden_size_keys(model), heads='width')
    pruner.prepare_from_supernet(model, inputs)
    group = pruner.groups.prunable['model.layers.0.self_attn.v_proj']
    assert group.num_channels == 8  # 16 positions, RoPE pairing i with i + 8
    torch.manual_seed(0)
    pruner.set_subnet(pruner.sample_subnet())
    masked = main_output(model, inputs)
    slim = pruner.deploy_subnet(copy.deepcopy(model), pruner.export_subnet())
    assert relative_error(main_output(slim, inputs), masked) <= 1e-4
    for i in range(2):
        assert attention_widths(slim, 'llama', i) == (32, 8, 8, 32)
        assert slim.model.layers[i].self_attn.head_dim == 8


def test_gemma_multi_query_prunes_query_heads_reloads_and_generates(tmp_path):
    """Gemma-2B's layout (one key/value head), tiny."""
    torch.manual_seed(0)
    model = transformers.GemmaForCausalLM(transformers.GemmaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=1, head_dim=16, vocab_size=100)).eval()
    inputs = {'input_ids': torch.randint(0, 100, (2, 8))}
    slim = razorlib.prune(model, inputs, ratio=0.5, gqa='query')
    attn = slim.model.layers[0].self_attn
    assert (attn.q_proj.out_features, attn.k_proj.out_features, attn.o_proj.in_features) == \
        (32, 16, 32)
    assert (slim.config.num_attention_heads, slim.config.num_key_value_heads) == (2, 1)
    assert save_pruned(slim, tmp_path).exact
    again = type(model).from_pretrained(tmp_path).eval()
    assert relative_error(main_output(again, inputs), main_output(slim, inputs)) <= 1e-6
    with torch.no_grad():
        cached = slim.generate(**inputs, max_new_tokens=4, do_sample=False)
        uncached = slim.generate(**inputs, max_new_tokens=4, do_sample=False, use_cache=False)
    assert torch.equal(cached, uncached)
