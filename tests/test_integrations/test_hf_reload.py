"""Slim Hugging Face models whose config describes them: the integration's prune rewrites
the config, save_pretrained + from_pretrained gives the same outputs, and per-layer
widths restore in one call from a channel config."""
import random

import pytest
from hf_builders import MODELS, build, main_output, relative_error

from razorlib.integrations.transformers import (CHANNELS_FILE, hidden_size_keys, load_pruned,
                                                prune, save_pruned, sync_config)


@pytest.mark.parametrize('name', sorted(MODELS))
def test_uniform_slim_model_reloads_with_from_pretrained(name, tmp_path):
    model, inputs = build(name)
    slim = prune(model, inputs, ratio=0.5)
    mlp_in = MODELS[name][2].format(i=1)
    dense = model.get_submodule(mlp_in).weight
    assert slim.get_submodule(mlp_in).weight.numel() * 2 == dense.numel()
    assert model.config.to_dict() != slim.config.to_dict()  # the model's own is untouched
    save_pruned(slim, tmp_path)
    assert not (tmp_path / CHANNELS_FILE).exists()
    again = type(model).from_pretrained(tmp_path).eval()
    assert relative_error(main_output(again, inputs), main_output(slim, inputs)) <= 1e-6


def test_the_config_names_the_slim_mlp_width():
    llama, inputs = build('llama')
    assert prune(llama, inputs, ratio=0.25).config.intermediate_size == 32
    gpt2, inputs = build('gpt2')
    assert gpt2.config.n_inner is None  # 4 * n_embd
    assert prune(gpt2, inputs, ratio=0.25).config.n_inner == 64


@pytest.mark.parametrize('name', ['llama', 'gpt2', 'vit'])
def test_per_layer_widths_reload_in_one_call(name, tmp_path):
    model, inputs = build(name)
    random.seed(4)
    slim = prune(model, inputs, pruner=dict(type='RatioPruner', ratios=(0.25, 0.75)),
                 uniform=False)
    widths = [slim.get_submodule(MODELS[name][2].format(i=i)).weight.numel() for i in range(2)]
    assert widths[0] != widths[1]
    sync = save_pruned(slim, tmp_path)
    assert not sync.exact and (tmp_path / CHANNELS_FILE).exists()
    again = load_pruned(tmp_path)
    assert type(again) is type(model)
    assert relative_error(main_output(again, inputs), main_output(slim, inputs)) <= 1e-6


def test_uniform_option_evens_out_sampled_widths():
    model, inputs = build('qwen2')
    random.seed(4)
    slim = prune(model, inputs, pruner=dict(type='RatioPruner', ratios=(0.25, 0.75)))
    widths = {layer.mlp.up_proj.out_features for layer in slim.model.layers}
    assert widths == {slim.config.intermediate_size} and widths != {128}


def test_hidden_size_stays_whole_by_default_and_can_be_opted_in():
    model, inputs = build('vit')
    assert hidden_size_keys(model) == ('vit.embeddings.patch_embeddings', )
    assert prune(model, inputs).config.hidden_size == 64
    slim = prune(model, inputs, hidden=True)
    assert slim.vit.embeddings.patch_embeddings.projection.out_channels == 32


def test_sync_config_rejects_what_is_no_transformers_model():
    import torch.nn as nn
    with pytest.raises(TypeError, match='Linear'):
        sync_config(nn.Linear(2, 2))
