"""``heads='width'`` in Hugging Face Llama-likes (4 query heads over 2 key/value heads of
16): every head keeps the same half of its ``head_dim`` positions, RoPE's pairs
``(i, i + 8)`` together and the shared rotary ``inv_freq`` sliced to the kept
frequencies; the masked supernet computes and counts what the slim model does.  A slim
``head_dim`` has no config that rebuilds it: without RoPE the channel file does, under
RoPE (transformers recomputes ``inv_freq`` from the config) saving refuses and plain
``from_pretrained`` fails loudly."""
import copy

import numpy as np
import pytest
import torch
from hf_builders import attention_widths, build, main_output, relative_error

from razorlib.integrations.transformers import hidden_size_keys, load_pruned, prune, save_pruned
from razorlib.pruning import ChannelConfig, ChannelSelection, L1NormPruner, slim_model
from razorlib.utils import get_model_complexity

LLAMA_LIKES = ('llama', 'mistral', 'qwen2')


@pytest.mark.parametrize('implementation', ['eager', 'sdpa'])
@pytest.mark.parametrize('name', LLAMA_LIKES)
def test_head_dim_halves_with_rope_pairs_and_the_kept_frequencies(name, implementation):
    model, inputs = build(name, attn_implementation=implementation)
    pruner = L1NormPruner(ratio=0.5, except_start_keys=hidden_size_keys(model), heads='width')
    pruner.prepare_from_supernet(model, inputs)
    space = pruner.groups.prunable[pruner.get_space_id('model.layers.0.self_attn.q_proj')]
    assert space.num_channels == 8  # 16 positions in RoPE pairs, shared by both layers
    assert sorted(space.params) == ['model.rotary_emb.inv_freq',
                                    'model.rotary_emb.original_inv_freq']
    pruner.set_subnet(pruner.sample_subnet())
    masked = main_output(model, inputs)
    masked_params = get_model_complexity(model, inputs).params
    cfg = pruner.export_subnet()
    slim = pruner.deploy_subnet(copy.deepcopy(model), cfg)
    for i, layer in enumerate(slim.model.layers):
        assert attention_widths(slim, name, i) == (32, 16, 16, 32)
        attn = layer.self_attn
        assert (attn.head_dim, attn.num_key_value_groups, attn.scaling) == (8, 2, 16 ** -0.5)
    assert relative_error(main_output(slim, inputs), masked) <= 1e-4
    assert masked_params == sum(p.numel() for p in slim.parameters())
    kept = np.array(cfg.modules['model.layers.1.self_attn.q_proj']['out'].index) % 16
    kept = kept.reshape(4, 8)
    assert (kept == kept[:1]).all() and set(kept[0]) == {(i + 8) % 16 for i in kept[0]}
    assert slim.model.rotary_emb.inv_freq.tolist() == \
        model.model.rotary_emb.inv_freq[kept[0][:4]].tolist()


@pytest.mark.parametrize('name', LLAMA_LIKES)
def test_a_slim_head_dim_refuses_to_save_and_fails_loudly_on_plain_reload(name, tmp_path):
    model, inputs = build(name)
    slim = prune(model, inputs, ratio=0.5, heads='width')
    assert slim.model.layers[0].self_attn.head_dim == 8
    # no head count was rewritten: 2 heads of 16 would load the weights and compute else
    assert (slim.config.num_attention_heads, slim.config.num_key_value_heads) == (4, 2)
    assert getattr(slim.config, 'head_dim', None) in (None, 16)  # Qwen2 sets none
    with pytest.raises(ValueError, match=r'model\.rotary_emb\.inv_freq: config builds \(8,\), '
                       r'the model has \(4,\)'):
        save_pruned(slim, tmp_path / 'pruned')
    assert not (tmp_path / 'pruned').exists()
    slim.save_pretrained(tmp_path / 'plain')
    with pytest.raises(RuntimeError, match='ignore_mismatched_sizes'):
        type(model).from_pretrained(tmp_path / 'plain')


def test_slicing_a_fresh_model_tells_head_widths_from_whole_heads_by_the_kept_indices():
    model, inputs = build('llama')
    pruner = L1NormPruner(ratio=0.5, except_start_keys=hidden_size_keys(model), heads='width')
    pruner.prepare_from_supernet(model, inputs)
    pruner.set_subnet(pruner.sample_subnet())
    masked, cfg = main_output(model, inputs), pruner.export_subnet()
    fresh, _ = build('llama')  # the same weights (seeded), no pruner: slim_model alone
    slim = slim_model(fresh, cfg)
    assert (slim.model.layers[0].self_attn.head_dim,
            slim.model.layers[0].self_attn.num_key_value_groups) == (8, 2)
    assert relative_error(main_output(slim, inputs), masked) <= 1e-4


def test_kept_channels_that_are_neither_whole_heads_nor_alike_in_every_head_are_refused():
    model, _ = build('llama')
    ragged = ChannelSelection(64, tuple(range(8)) + tuple(range(16, 20)))  # 8 of head 0, 4 of 1
    cfg = ChannelConfig({'model.layers.0.self_attn.q_proj': {'out': ragged},
                         'model.layers.0.self_attn.o_proj': {'in': ragged}})
    with pytest.raises(ValueError, match=r'model\.layers\.0\.self_attn\.q_proj: the kept '
                       'channels are neither whole heads of 16 nor the same positions'):
        slim_model(model, cfg)
    assert model.model.layers[0].self_attn.q_proj.out_features == 64  # untouched


def test_head_widths_of_a_meta_model_are_refused_naming_the_reason():
    import torch
    model, inputs = build('llama')
    with torch.device('meta'):
        shell = type(model)(model.config)
    pruner = L1NormPruner(ratio=0.5, except_start_keys=hidden_size_keys(shell), heads='width')
    with pytest.raises(ValueError, match="heads='width' compares the slim model with the "
                       'masked one on real weights; this LlamaForCausalLM is on the meta'):
        pruner.prepare_from_supernet(shell, {'input_ids': inputs['input_ids'].to('meta')})
    assert not any(name.endswith('_mask') for name, _ in shell.named_buffers())


@pytest.mark.parametrize('name, attention, counts', [
    ('bert', 'encoder.layer.{i}.attention.self', ('num_attention_heads', 'attention_head_size')),
    ('vit', 'vit.layers.{i}.attention', ('num_attention_heads', 'head_dim')),
    ('gpt2', 'transformer.h.{i}.attn', ('num_heads', 'head_dim')),
])
def test_head_widths_without_rope_reload_from_the_channel_file(name, attention, counts,
                                                               tmp_path):
    # the channel file must keep the first positions of every head: a prefix of the
    # channels would read as fewer, whole heads and load the weights into other heads
    model, inputs = build(name)
    slim = prune(model, inputs, ratio=0.5, heads='width')
    assert not save_pruned(slim, tmp_path).exact
    again = load_pruned(tmp_path)
    for i in range(2):
        module = again.get_submodule(attention.format(i=i))
        assert tuple(getattr(module, count) for count in counts) == (4, 8)
    assert relative_error(main_output(again, inputs), main_output(slim.eval(), inputs)) <= 1e-6


def test_a_narrowed_head_dim_beside_a_halved_hidden_size_keeps_the_dense_scale_on_reload(
        tmp_path):
    """In GPT-2 a halved ``n_embd`` would give the narrowed heads' shapes (4 heads of 8),
    but a model built from it scales the attention by 8 ** -0.5, where the slim model
    keeps the dense 16 ** -0.5: the config keeps its hidden size and head count, and the
    channel file carries the widths."""
    model, inputs = build('gpt2')
    with torch.no_grad():  # a softmax far from uniform, so the scale shows
        for block in model.transformer.h:
            block.attn.c_attn.weight[:, :128] *= 20
    slim = prune(model, inputs, ratio=0.5, heads='width', hidden=True)
    assert (slim.transformer.h[0].attn.head_dim, slim.transformer.h[0].attn.scaling) == \
        (8, 0.25)
    assert slim.config.n_embd == 64
    assert not save_pruned(slim, tmp_path).exact
    again = load_pruned(tmp_path)
    assert again.transformer.h[0].attn.scaling == 0.25
    assert relative_error(main_output(again, inputs), main_output(slim.eval(), inputs)) <= 1e-6
