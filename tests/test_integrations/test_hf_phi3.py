"""Phi-3's attention: one ``qkv_proj`` cut at ``config.num_attention_heads * head_dim`` and
``num_key_value_heads * head_dim``.  The trace lets the slices take their channels, the
``Phi3Heads`` entry sets each pruned layer's head counts (the query heads in a view of the
config shared by every layer, which follows that config otherwise), and the pruner's run
on the model checks that the slim slices take the kept heads; the slim model reloads and
generates as the masked one.  Under ``gqa='query'`` the key/value heads, channels of
``qkv_proj`` too, are left out of its group and kept whole, and the query heads prune."""
import copy

import pytest
import torch
from hf_builders import build, main_output, relative_error

import razorlib
from razorlib.integrations.transformers import (hidden_size_keys, load_pruned, prune,
                                                save_pruned)
from razorlib.pruning import L1NormPruner
from razorlib.utils import get_model_complexity

transformers = pytest.importorskip('transformers')

#: (qkv_proj's output, o_proj's input, key/value heads, query heads) at ratio 0.5 of 4 query
#: heads over 2 key/value heads of 16: one key/value head goes with its 2 query heads
HALF = (64, 32, 1, 2)


def _widths(model, i):
    attn = model.model.layers[i].self_attn
    return (attn.qkv_proj.out_features, attn.o_proj.in_features, attn.num_key_value_heads,
            attn.config.num_attention_heads)


@pytest.mark.parametrize('implementation', ['eager', 'sdpa'])
def test_masked_model_computes_and_counts_what_the_slim_model_does(implementation):
    model, inputs = build('phi3', attn_implementation=implementation)
    dense = main_output(model, inputs)
    pruner = L1NormPruner(ratio=0.5, except_start_keys=hidden_size_keys(model))
    pruner.prepare_from_supernet(model, inputs)
    attention = [gid for gid in pruner.groups.prunable if '.self_attn.' in gid]
    assert attention == [f'model.layers.{i}.self_attn.qkv_proj' for i in range(2)]
    assert pruner.groups.sliced == attention
    pruner.set_subnet(pruner.sample_subnet())
    masked = main_output(model, inputs)
    masked_params = get_model_complexity(model, inputs).params
    slim = pruner.deploy_subnet(copy.deepcopy(model), pruner.export_subnet())
    assert [_widths(slim, i) for i in range(2)] == [HALF] * 2
    assert relative_error(main_output(slim, inputs), masked) <= 1e-4
    assert relative_error(masked, dense) > 1e-2
    assert masked_params == sum(p.numel() for p in slim.parameters())


#: the same under ``gqa='query'``: both key/value heads kept, one query head of each group
QUERY_HALF = (96, 32, 2, 2)


@pytest.mark.parametrize('implementation', ['eager', 'sdpa'])
def test_query_heads_alone_prune_and_the_fused_kv_heads_stay_whole(implementation, tmp_path):
    """``gqa='query'`` keeps the key/value heads, which are channels of ``qkv_proj`` too:
    they are left out of the projection's group, always kept, and its query heads prune."""
    model, inputs = build('phi3', attn_implementation=implementation)
    pruner = L1NormPruner(ratio=0.5, except_start_keys=hidden_size_keys(model), gqa='query')
    pruner.prepare_from_supernet(model, inputs)
    group = pruner.groups.prunable['model.layers.0.self_attn.qkv_proj']
    # 4 query heads of 16, the same 2 of each of 2 key/value groups: 2 channels
    assert (group.num_channels, group.width, len(group.kept)) == (2, 128, 4)
    assert {r.message for r in group.kept_reasons} == {"gqa='query' keeps key/value heads "
                                                       'whole (2 key/value heads of 2 query '
                                                       'heads each)'}
    pruner.set_subnet(pruner.sample_subnet())
    masked = main_output(model, inputs)
    slim = pruner.deploy_subnet(copy.deepcopy(model), pruner.export_subnet())
    assert [_widths(slim, i) for i in range(2)] == [QUERY_HALF] * 2
    assert slim.model.layers[0].self_attn.num_key_value_groups == 1
    assert relative_error(main_output(slim, inputs), masked) <= 1e-4
    assert save_pruned(slim, tmp_path).exact
    again = type(model).from_pretrained(tmp_path, attn_implementation=implementation).eval()
    assert [_widths(again, i) for i in range(2)] == [QUERY_HALF] * 2
    assert relative_error(main_output(again, inputs), main_output(slim, inputs)) <= 1e-6


def _attention_heads(slim, inputs):
    """The head count of each layer's attention weights, with the eager implementation
    set on the model (sdpa returns no weights)."""
    slim.set_attn_implementation('eager')
    with torch.no_grad():
        attentions = slim(**inputs, output_attentions=True).attentions
    return [None if a is None else a.shape[1] for a in attentions]


def test_layers_pruned_alike_follow_the_rewritten_config():
    model, inputs = build('phi3')
    slim = razorlib.prune(model, inputs, ratio=0.5)
    assert model.config.num_attention_heads == 4  # the caller's model is untouched
    assert model.model.layers[0].self_attn.config is model.config
    assert (slim.config.num_attention_heads, slim.config.num_key_value_heads) == (2, 1)
    assert _attention_heads(slim, inputs) == [2, 2]


def _per_layer_slim(model, inputs):
    """``model`` with half the heads and MLP of layer 0 pruned, layer 1 whole."""
    pruner = L1NormPruner(except_start_keys=hidden_size_keys(model))
    pruner.prepare_from_supernet(copy.deepcopy(model), inputs)
    orders = pruner.channel_orders()
    subnet = {gid: pruner.keep_ratio(group, 1.0 if '.1.' in gid else 0.5, orders[gid])
              for gid, group in pruner.groups.prunable.items()}
    pruner.set_subnet(subnet)
    return pruner.deploy_subnet(copy.deepcopy(model), pruner.export_subnet())


def test_a_layer_with_its_own_head_count_follows_later_changes_of_the_shared_config():
    # a copy of the config kept sdpa in layer 0, which then returned no attention weights
    model, inputs = build('phi3')
    slim = _per_layer_slim(model, inputs)
    assert slim.model.layers[0].self_attn.config.num_attention_heads == 2
    assert slim.config.num_attention_heads == 4
    assert _attention_heads(slim, inputs) == [2, 4]
    again = copy.deepcopy(slim)  # the view follows the copy's config, not the original's
    again.config.sliding_window = 3
    assert again.model.layers[0].self_attn.config.sliding_window == 3
    assert slim.model.layers[0].self_attn.config.sliding_window != 3


def test_uniform_heads_reload_with_from_pretrained_and_generate(tmp_path):
    model, inputs = build('phi3')
    slim = prune(model, inputs, ratio=0.5)
    assert save_pruned(slim, tmp_path).exact
    again = type(model).from_pretrained(tmp_path).eval()
    assert [_widths(again, i) for i in range(2)] == [HALF] * 2
    assert relative_error(main_output(again, inputs), main_output(slim, inputs)) <= 1e-6
    with torch.no_grad():
        cached = slim.generate(**inputs, max_new_tokens=4, do_sample=False)
        uncached = slim.generate(**inputs, max_new_tokens=4, do_sample=False, use_cache=False)
    assert torch.equal(cached, uncached)


def test_per_layer_heads_reload_from_the_channel_file(tmp_path):
    model, inputs = build('phi3')
    slim = _per_layer_slim(model, inputs)
    assert [_widths(slim, i) for i in range(2)] == [HALF, (128, 64, 2, 4)]
    save_pruned(slim, tmp_path)
    again = load_pruned(tmp_path)
    assert [_widths(again, i) for i in range(2)] == [HALF, (128, 64, 2, 4)]
    assert relative_error(main_output(again, inputs), main_output(slim, inputs)) <= 1e-6
    assert _attention_heads(again, inputs) == [2, 4]


def test_on_the_meta_device_the_attention_stays_whole_naming_why():
    with torch.device('meta'):
        model = build('phi3')[0]
    pruner = L1NormPruner(except_start_keys=hidden_size_keys(model))
    pruner.prepare_from_supernet(model, {'input_ids': torch.zeros(2, 8, dtype=torch.long,
                                                                  device='meta')})
    assert not [gid for gid in pruner.groups.prunable if '.self_attn.' in gid]
    reasons = pruner.groups.groups['model.layers.0.self_attn.qkv_proj'].frozen_reasons
    assert [r.message for r in reasons] == [
        'a slice of these channels takes them at bounds the code computes, which only a run '
        'on real weights can check (the model is on the meta device)']
    assert [gid for gid in pruner.groups.prunable if '.mlp.' in gid]
