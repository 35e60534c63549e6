"""Slim Hugging Face models whose config describes them: the integration's prune rewrites
the config (MLP widths, head counts, hidden size), save_pretrained + from_pretrained gives the same
outputs, and what a config cannot say (per-layer widths, the heads of models whose head
width is hidden / heads) restores in one call from a channel config."""
import copy
import random

import numpy as np
import pytest
import torch
from hf_builders import (HALF_ATTENTION, MODELS, attention_widths, build, main_output,
                         relative_error)

from razorlib.integrations.transformers import (CHANNELS_FILE, HEAD_WIDTHS_FILE, hidden_size_keys,
                                                load_pruned, prune, save_pruned, sync_config,
                                                uniform_subnet)
from razorlib.pruning import ImportancePruner, L1NormPruner
from razorlib.utils import get_model_complexity

transformers = pytest.importorskip('transformers')

#: What the config of each model says after prune(ratio=0.5), where it can say the heads:
#: Qwen2 and ViT size heads by ``config.head_dim`` when it is set, so it is pinned.
CONFIG_HEADS = {
    'llama': dict(num_attention_heads=2, num_key_value_heads=1, intermediate_size=64),
    'mistral': dict(num_attention_heads=2, num_key_value_heads=1, intermediate_size=64),
    'qwen2': dict(num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                  intermediate_size=64),
    'vit': dict(num_attention_heads=2, head_dim=16, intermediate_size=64),
    'phi3': dict(num_attention_heads=2, num_key_value_heads=1, intermediate_size=64),
}


@pytest.mark.parametrize('name', sorted(CONFIG_HEADS))
def test_uniform_slim_model_reloads_with_from_pretrained(name, tmp_path):
    model, inputs = build(name)
    slim = prune(model, inputs, ratio=0.5)
    assert attention_widths(slim, name, 1) == HALF_ATTENTION[name]
    assert {key: getattr(slim.config, key) for key in CONFIG_HEADS[name]} == CONFIG_HEADS[name]
    assert model.config.to_dict() != slim.config.to_dict()  # the model's own is untouched
    assert save_pruned(slim, tmp_path).exact
    assert not (tmp_path / CHANNELS_FILE).exists()
    again = type(model).from_pretrained(tmp_path).eval()
    assert attention_widths(again, name, 1) == HALF_ATTENTION[name]
    assert relative_error(main_output(again, inputs), main_output(slim, inputs)) <= 1e-6


@pytest.mark.parametrize('name, mlp, attention, heads', [
    ('gpt2', dict(n_inner=128), 'transformer.h.{i}.attn',
     dict(num_heads=2, split_size=32, head_dim=16)),
    ('bert', dict(intermediate_size=64), 'encoder.layer.{i}.attention.self',
     dict(num_attention_heads=2, all_head_size=32, attention_head_size=16)),
])
def test_heads_the_config_cannot_say_reload_from_a_channel_file(name, mlp, attention, heads,
                                                                tmp_path):
    model, inputs = build(name)
    slim = prune(model, inputs, ratio=0.5)
    assert attention_widths(slim, name, 1) == HALF_ATTENTION[name]
    sync = save_pruned(slim, tmp_path)
    assert not sync.exact and (tmp_path / CHANNELS_FILE).exists()
    assert slim.config.num_attention_heads == 4  # 2 would mean heads of hidden / 2 = 32
    assert {key: getattr(slim.config, key) for key in mlp} == mlp  # the MLPs it can say
    again = load_pruned(tmp_path)
    assert type(again) is type(model)
    for i in range(2):
        module = again.get_submodule(attention.format(i=i))
        assert {key: getattr(module, key) for key in heads} == heads
        assert attention_widths(again, name, i) == HALF_ATTENTION[name]
    assert relative_error(main_output(again, inputs), main_output(slim, inputs)) <= 1e-6


def test_the_config_names_the_slim_mlp_width():
    llama, inputs = build('llama')
    assert prune(llama, inputs, ratio=0.25).config.intermediate_size == 32
    gpt2, inputs = build('gpt2')
    assert gpt2.config.n_inner is None  # 4 * n_embd
    assert prune(gpt2, inputs, ratio=0.25).config.n_inner == 64


def test_head_counts_a_config_class_refuses_go_to_the_channel_file(tmp_path):
    model, inputs = build('llama', num_key_value_heads=4)
    slim = prune(model, inputs, ratio=0.75)  # 3 heads: LlamaConfig wants 64 % heads == 0
    assert attention_widths(slim, 'llama', 0) == (48, 48, 48, 48)
    assert not save_pruned(slim, tmp_path).exact
    assert (slim.config.num_attention_heads, slim.config.intermediate_size) == (4, 96)
    again = load_pruned(tmp_path)
    assert again.model.layers[1].self_attn.num_key_value_groups == 1
    assert relative_error(main_output(again, inputs), main_output(slim, inputs)) <= 1e-6


class _WholeGroupsLlama(transformers.LlamaForCausalLM):
    """A Llama that, as some config classes do, wants whole query groups per kv head."""

    def __init__(self, config):
        if config.num_attention_heads % config.num_key_value_heads:
            raise ValueError('num_attention_heads must be a multiple of num_key_value_heads')
        super().__init__(config)


def test_query_and_key_value_head_counts_change_together_when_alone_they_cannot():
    torch.manual_seed(0)
    model = _WholeGroupsLlama(transformers.LlamaConfig(
        hidden_size=96, head_dim=16, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, vocab_size=100)).eval()
    inputs = {'input_ids': torch.randint(0, 100, (2, 8))}
    slim = prune(model, inputs, ratio=0.75)  # 3 of 4 groups of one query and one kv head
    assert (slim.config.num_attention_heads, slim.config.num_key_value_heads) == (3, 3)
    assert sync_config(slim).exact


def _slim(model, inputs, share, hidden=False):
    """``model`` sliced to keep ``share(group id)`` of each group (at least one channel)."""
    pruner = L1NormPruner(except_start_keys=() if hidden else hidden_size_keys(model))
    pruner.prepare_from_supernet(model, inputs)
    subnet = {}
    for gid, group in pruner.groups.prunable.items():
        count = max(1, round(group.num_channels * share(gid)))
        subnet[gid] = torch.from_numpy(group.keep_best(np.arange(group.num_channels), count))
    pruner.set_subnet(subnet)
    return pruner.deploy_subnet(copy.deepcopy(model), pruner.export_subnet())


def _assert_reloads(model, slim, name, inputs, tmp_path):
    sync = save_pruned(slim, tmp_path)
    assert not sync.exact and (tmp_path / CHANNELS_FILE).exists()
    again = load_pruned(tmp_path)
    assert type(again) is type(model)
    assert [attention_widths(again, name, i) for i in range(2)] == \
        [attention_widths(slim, name, i) for i in range(2)]
    assert relative_error(main_output(again, inputs), main_output(slim, inputs)) <= 1e-6
    return sync


@pytest.mark.parametrize('name', ['llama', 'gpt2', 'vit'])
def test_per_layer_widths_reload_in_one_call(name, tmp_path):
    model, inputs = build(name)
    slim = _slim(model, inputs, lambda gid: 0.25 if '.0.' in gid else 0.75)
    widths = [slim.get_submodule(MODELS[name][2].format(i=i)).weight.numel() for i in range(2)]
    assert widths[0] != widths[1]
    assert attention_widths(slim, name, 0) != attention_widths(slim, name, 1)
    _assert_reloads(model, slim, name, inputs, tmp_path)


def test_per_layer_heads_stay_out_of_the_config_beside_a_halved_hidden_size(tmp_path):
    model, inputs = build('vit', head_dim=8)  # 4 heads of 8: 32 wide in a hidden size of 64
    slim = _slim(model, inputs, lambda gid: 0.75 if gid == 'vit.layers.1.attention.v_proj'
                 else 0.5, hidden=True)
    assert [attention_widths(slim, 'vit', i)[0] for i in range(2)] == [16, 24]
    sync = _assert_reloads(model, slim, 'vit', inputs, tmp_path)
    # hidden 64 -> 32 suggests 2 of 4 heads: they fit layer 0 but would cut layer 1's 3
    assert sync.changed == {'intermediate_size': (128, 64), 'hidden_size': (64, 32)}


def test_uniform_option_evens_out_sampled_widths():
    model, inputs = build('qwen2')
    random.seed(4)
    slim = prune(model, inputs, pruner=dict(type='RatioPruner', ratios=(0.25, 0.75)))
    widths = {layer.mlp.up_proj.out_features for layer in slim.model.layers}
    assert widths == {slim.config.intermediate_size} and widths != {128}


def test_uniform_widths_keep_round_to():
    # the mean of the sampled widths (64 and 80 of 128: 72) was kept, no multiple of 16
    model, inputs = build('llama')
    pruner = ImportancePruner(ratios=(0.5, 0.625), round_to=16,
                              except_start_keys=hidden_size_keys(model))
    pruner.prepare_from_supernet(model, inputs)
    orders, groups = pruner.channel_orders(), pruner.groups.prunable
    subnet = {gid: torch.ones(group.num_channels, dtype=torch.bool)
              for gid, group in groups.items()}
    for layer, count in ((0, 64), (1, 80)):
        gid = pruner.get_space_id(f'model.layers.{layer}.mlp.up_proj')
        subnet[gid] = torch.from_numpy(groups[gid].keep_best(np.asarray(orders[gid]), count))
    kept = uniform_subnet(pruner, subnet)
    widths = {int(kept[pruner.get_space_id(f'model.layers.{layer}.mlp.up_proj')].sum())
              for layer in (0, 1)}
    assert widths == {80}  # of the allowed 64 and 80, the larger on a tie


@pytest.mark.parametrize('budget', [dict(flops=0.6), dict(params=0.7),
                                    dict(pruner=dict(type='ImportancePruner', flops=0.6))],
                         ids=['flops', 'params', 'in-the-pruner-config'])
def test_a_budget_is_met_and_the_config_describes_the_widths(budget, tmp_path):
    # it was dropped: the pruner sampled its default ratio, or gave the dense model back
    model, inputs = build('llama')
    slim = prune(model, inputs, **budget)
    key, limit = next((k, v) for k, v in {**budget, **budget.get('pruner', {})}.items()
                      if k in ('flops', 'params'))
    dense, kept = (getattr(get_model_complexity(m, inputs), key) for m in (model, slim))
    assert 0.5 * limit < kept / dense <= limit
    assert sync_config(slim).exact
    slim.save_pretrained(tmp_path)
    again = type(model).from_pretrained(tmp_path)
    assert relative_error(main_output(again, inputs), main_output(slim, inputs)) < 1e-6


def test_allocations_that_give_each_layer_its_own_width_need_uniform_false():
    model, inputs = build('llama')
    with pytest.raises(ValueError, match='global_ranking= and sensitivity= give every layer '
                       'its own width.*pass uniform=False'):
        prune(model, inputs, flops=0.6, global_ranking=True)
    for options in (True, {}):  # {}: the sensitivity allocation's defaults
        with pytest.raises(ValueError, match='pass uniform=False'):
            prune(model, inputs, flops=0.6, sensitivity=options)
    slim = prune(model, inputs, flops=0.6, global_ranking=True, uniform=False)
    assert main_output(slim, inputs).shape == main_output(model, inputs).shape


def test_hidden_size_stays_whole_by_default_and_can_be_opted_in(tmp_path):
    model, inputs = build('vit')
    assert hidden_size_keys(model) == ('vit.embeddings.patch_embeddings', )
    assert prune(model, inputs).config.hidden_size == 64
    with pytest.warns(UserWarning, match='outputs change'):
        slim = prune(model, inputs, hidden=True)
    assert slim.vit.embeddings.patch_embeddings.projection.out_channels == 32
    assert slim.config.hidden_size == 32
    save_pruned(slim, tmp_path)  # the config says it all: no channel file
    assert not (tmp_path / CHANNELS_FILE).exists()
    again = load_pruned(tmp_path)
    assert again.vit.layers[0].attention.num_attention_heads == 2
    assert relative_error(main_output(again, inputs), main_output(slim, inputs)) <= 1e-6


def test_sync_config_rejects_what_is_no_transformers_model():
    import torch.nn as nn
    with pytest.raises(TypeError, match='Linear'):
        sync_config(nn.Linear(2, 2))


@pytest.mark.parametrize('tied', [False, True], ids=['untied', 'tied'])
@pytest.mark.parametrize('name', ['llama', 'qwen2', 'mistral'])
def test_a_pruned_hidden_size_is_written_to_the_config_and_reloads(name, tied, tmp_path):
    model, inputs = build(name, tie_word_embeddings=tied)
    with pytest.warns(UserWarning, match='outputs change'):
        slim = prune(model, inputs, ratio=0.5, hidden=True)
    assert slim.model.norm.weight.shape == (32, )  # RMSNorms follow the hidden size
    assert (slim.lm_head.weight is slim.model.embed_tokens.weight) == tied
    assert (slim.config.hidden_size, slim.config.head_dim) == (32, 16)
    assert save_pruned(slim, tmp_path).exact
    assert not (tmp_path / CHANNELS_FILE).exists()
    again = type(model).from_pretrained(tmp_path).eval()
    assert relative_error(main_output(again, inputs), main_output(slim.eval(), inputs)) <= 1e-6


def _bert_classifier():
    torch.manual_seed(0)
    config = transformers.BertConfig(hidden_size=64, intermediate_size=128, num_labels=3,
                                     num_hidden_layers=2, num_attention_heads=4, vocab_size=100)
    inputs = {'input_ids': torch.randint(0, 100, (2, 8),
                                         generator=torch.Generator().manual_seed(1))}
    return transformers.BertForSequenceClassification(config).eval(), inputs


@pytest.mark.parametrize('name', ['gpt2', 'bert'])
def test_a_halved_hidden_size_halves_the_head_count_where_heads_are_hidden_wide(
        name, tmp_path):
    """In GPT-2 and BERT a head is hidden_size / heads wide.  The slim model keeps 2 heads
    of 16 in a hidden size of 32; a config saying hidden 32 with the dense 4 heads builds
    the same tensors as 4 heads of 8 and reloaded other outputs, silently."""
    model, inputs = build(name) if name == 'gpt2' else _bert_classifier()
    with pytest.warns(UserWarning, match='outputs change'):
        slim = prune(model, inputs, ratio=0.5, hidden=True)
    config = slim.config
    assert (config.hidden_size, config.num_attention_heads) == (32, 2)
    assert save_pruned(slim, tmp_path).exact
    assert not (tmp_path / CHANNELS_FILE).exists()
    again = type(model).from_pretrained(tmp_path).eval()
    assert relative_error(main_output(again, inputs), main_output(slim.eval(), inputs)) <= 1e-6


def test_a_config_with_the_right_shapes_and_the_wrong_heads_is_not_written():
    model, inputs = build('gpt2')
    with pytest.warns(UserWarning, match='outputs change'):
        slim = prune(model, inputs, ratio=0.5, hidden=True)
    slim.config = copy.deepcopy(model.config)
    sync = sync_config(slim, fields=('n_embd', ))  # the hidden size alone: 4 heads of 8
    assert sync.changed == {} and not sync.exact
    assert slim.config.n_embd == 64


def _gpt2_heads(model):
    """``(num_heads, head_dim, split_size)`` of each GPT-2 block's attention."""
    return [(b.attn.num_heads, b.attn.head_dim, b.attn.split_size) for b in model.transformer.h]


def _assert_reloads_exactly(slim, inputs, folder):
    """``save_pruned`` writes both channel files and ``load_pruned`` gives ``slim``'s
    heads and outputs."""
    assert not save_pruned(slim, folder).exact
    assert (folder / CHANNELS_FILE).exists() and (folder / HEAD_WIDTHS_FILE).exists()
    again = load_pruned(folder)
    assert _gpt2_heads(again) == _gpt2_heads(slim)
    assert torch.allclose(main_output(again, inputs), main_output(slim.eval(), inputs),
                          rtol=0, atol=1e-6)


def test_a_gpt2_pruned_twice_per_layer_reloads(tmp_path):
    """Block 0 keeps one head of 16, then 4 of its positions (a lone head's channels are
    its positions): fewer and narrower heads, which one channel config cannot slice."""
    model, inputs = build('gpt2')
    random.seed(3)  # RatioPruner draws 0.25 for block 0, 0.75 for block 1, both times
    per_layer = dict(pruner=dict(type='RatioPruner', ratios=(0.25, 0.75)), uniform=False)
    once = prune(model, inputs, **per_layer)
    assert _gpt2_heads(once) == [(1, 16, 16), (3, 16, 48)]
    twice = prune(once, inputs, **per_layer)
    assert _gpt2_heads(twice) == [(1, 4, 4), (2, 16, 32)]
    _assert_reloads_exactly(twice, inputs, tmp_path)
    save_pruned(once, tmp_path)  # one channel file now: the second one goes
    assert not (tmp_path / HEAD_WIDTHS_FILE).exists()
    assert _gpt2_heads(load_pruned(tmp_path)) == _gpt2_heads(once)


def test_a_head_width_then_heads_pruned_reloads(tmp_path):
    model, inputs = build('gpt2')
    narrow = prune(model, inputs, ratio=0.5, heads='width')
    assert _gpt2_heads(narrow) == [(4, 8, 32)] * 2
    fewer = prune(narrow, inputs, ratio=0.5)
    assert _gpt2_heads(fewer) == [(2, 8, 16)] * 2
    _assert_reloads_exactly(fewer, inputs, tmp_path)


def test_a_head_widths_file_without_the_channel_file_is_refused(tmp_path):
    model, inputs = build('gpt2')
    fewer = prune(prune(model, inputs, ratio=0.5, heads='width'), inputs, ratio=0.5)
    save_pruned(fewer, tmp_path)
    (tmp_path / CHANNELS_FILE).unlink()
    with pytest.raises(ValueError, match=f'{HEAD_WIDTHS_FILE} narrows heads that '
                       f'.*{CHANNELS_FILE} cuts, and that file is missing'):
        load_pruned(tmp_path)
