"""MLP widths that a config holds in a field of its own: DistilBERT's ``hidden_dim``,
Falcon's ``ffn_hidden_size`` (before, no rewrite: its slim MLPs needed the channel file) and
Dinov2's (MGP-STR's) ``mlp_ratio``, the width ``int(hidden_size * mlp_ratio)``.  A width
such a field holds exactly is written there and plain ``from_pretrained`` rebuilds the
slim model; one it cannot hold stays in the channel file, which ``load_pruned`` reads."""
import copy

import numpy as np
import pytest
import torch
import torch.nn as nn

from razorlib.integrations.transformers import (CHANNELS_FILE, hidden_size_keys, load_pruned,
                                                prune, save_pruned, sync_config)
from razorlib.pruning import L1NormPruner

transformers = pytest.importorskip('transformers')


def _distilbert() -> nn.Module:
    torch.manual_seed(0)
    return transformers.DistilBertModel(transformers.DistilBertConfig(
        dim=64, hidden_dim=128, n_layers=2, n_heads=4, vocab_size=100,
        max_position_embeddings=32)).eval()


def _dinov2(**overrides) -> nn.Module:
    torch.manual_seed(0)
    config = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, mlp_ratio=2,
                  image_size=32, patch_size=8)
    return transformers.Dinov2Model(transformers.Dinov2Config(**{**config, **overrides})).eval()


def _mgpstr(**overrides) -> nn.Module:
    """MGP-STR: a ViT whose config's ``mlp_ratio`` is a float."""
    torch.manual_seed(0)
    config = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, mlp_ratio=2.0,
                  image_size=[16, 32], patch_size=8)
    return transformers.MgpstrModel(transformers.MgpstrConfig(**{**config, **overrides})).eval()


def _falcon() -> nn.Module:
    """Falcon: the MLP is ``ffn_hidden_size`` wide (default ``4 * hidden_size``)."""
    torch.manual_seed(0)
    return transformers.FalconModel(transformers.FalconConfig(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=100,
        new_decoder_architecture=True, num_kv_heads=2)).eval()


TOKENS = {'input_ids': torch.randint(0, 100, (2, 8), generator=torch.Generator().manual_seed(0))}
IMAGES = {'pixel_values': torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))}
TEXT_IMAGES = {'pixel_values': torch.randn(2, 3, 16, 32,
                                           generator=torch.Generator().manual_seed(0))}


def _mlp_pruned(model: nn.Module, inputs: dict, keep: int, mlp: str) -> nn.Module:
    """``model`` with ``keep`` channels of every MLP (the groups named ``...{mlp}``) and
    everything else whole."""
    pruner = L1NormPruner(except_start_keys=hidden_size_keys(model))
    pruner.prepare_from_supernet(model, inputs)
    subnet = {gid: torch.from_numpy(group.keep_best(
        np.arange(group.num_channels), keep if gid.endswith(mlp) else group.num_channels))
        for gid, group in pruner.groups.prunable.items()}
    pruner.set_subnet(subnet)
    return pruner.deploy_subnet(copy.deepcopy(model), pruner.export_subnet()).eval()


def _output(model: nn.Module, inputs: dict) -> torch.Tensor:
    with torch.no_grad():
        return model(**inputs).last_hidden_state


@pytest.mark.parametrize('build, inputs, mlp, keep, field, value', [
    (_distilbert, TOKENS, 'ffn.lin1', 48, 'hidden_dim', 48),
    (_falcon, TOKENS, 'mlp.dense_h_to_4h', 128, 'ffn_hidden_size', 128),
    (_dinov2, IMAGES, 'mlp.fc1', 64, 'mlp_ratio', 1),  # an int: Dinov2Config takes no float
    (_mgpstr, TEXT_IMAGES, 'mlp.fc1', 38, 'mlp_ratio', 0.59375),  # int(64 * 0.59375) = 38
])
def test_an_mlp_width_in_a_field_of_its_own_reloads_with_from_pretrained(
        build, inputs, mlp, keep, field, value, tmp_path):
    model = build()
    slim = _mlp_pruned(model, inputs, keep, mlp)
    sync = save_pruned(slim, tmp_path)
    assert sync.changed == {field: (getattr(model.config, field), value)} and sync.exact
    assert type(getattr(slim.config, field)) is type(value)
    assert not (tmp_path / CHANNELS_FILE).exists()
    again = type(model).from_pretrained(tmp_path).eval()
    assert getattr(again.config, field) == value
    assert torch.equal(_output(again, inputs), _output(slim, inputs))


def test_a_distilbert_pruned_whole_writes_its_mlp_and_saves_its_heads_beside(tmp_path):
    model = _distilbert()
    slim = prune(model, TOKENS, ratio=0.5)  # heads of dim / n_heads: no config says 2 of 16
    assert slim.config.hidden_dim == 64
    assert not save_pruned(slim, tmp_path).exact and (tmp_path / CHANNELS_FILE).exists()
    again = load_pruned(tmp_path)
    assert [layer.ffn.lin1.out_features for layer in again.transformer.layer] == [64, 64]
    assert torch.equal(_output(again, TOKENS), _output(slim.eval(), TOKENS))


def test_a_width_an_int_mlp_ratio_cannot_hold_reloads_from_the_channel_file(tmp_path):
    model = _dinov2()
    with pytest.warns(UserWarning, match=r'cannot describe 6 of its tensors \(encoder.layer.0.'
                                         r'mlp.fc1.bias: config builds \(128,\), the model has '
                                         r'\(32,\)'):
        slim = prune(model, IMAGES, ratio=0.25)  # 32 = 64 * 0.5: Dinov2Config takes an int
    assert slim.config.mlp_ratio == 2
    assert not save_pruned(slim, tmp_path).exact and (tmp_path / CHANNELS_FILE).exists()
    with pytest.raises(RuntimeError, match='ignore_mismatched_sizes'):
        type(model).from_pretrained(tmp_path)
    again = load_pruned(tmp_path)
    assert [layer.mlp.fc1.out_features for layer in again.encoder.layer] == [32, 32]
    assert torch.equal(_output(again, IMAGES), _output(slim.eval(), IMAGES))


def test_a_ratio_whose_product_falls_short_of_the_width_is_not_written(tmp_path):
    model = _mgpstr(hidden_size=22, num_attention_heads=2)
    assert int(22 * (15 / 22)) == 14  # the model would build 14 channels from 15 / 22
    slim = _mlp_pruned(model, TEXT_IMAGES, 15, 'mlp.fc1')
    sync = sync_config(slim)
    assert not sync.changed and slim.config.mlp_ratio == 2.0
    assert {m.name for m in sync.mismatches} == {
        f'encoder.blocks.{i}.mlp.{name}' for i in range(2)
        for name in ('fc1.weight', 'fc1.bias', 'fc2.weight')}
    save_pruned(slim, tmp_path)
    again = load_pruned(tmp_path)
    assert [block.mlp.fc1.out_features for block in again.encoder.blocks] == [15, 15]
    assert torch.equal(_output(again, TEXT_IMAGES), _output(slim, TEXT_IMAGES))


@pytest.mark.parametrize('hidden, heads, ratio, changed', [
    (32, 2, 2, dict(hidden_size=(64, 32))),  # the MLP halved with it: the ratio holds
    (32, 2, 1, dict(hidden_size=(64, 32), mlp_ratio=(2, 1))),  # 64 of 128: 32 * 2 is not it
    (48, 3, 1, dict(hidden_size=(64, 48), mlp_ratio=(2, 1))),
])
def test_an_mlp_ratio_is_taken_over_the_slim_hidden_size(
        hidden, heads, ratio, changed, tmp_path):
    """A Dinov2 built slim (heads of 16 as the dense one's) under the dense config, as a
    pruner leaves it: the ratio is written after the hidden size, over the new one."""
    dense = _dinov2()
    slim = _dinov2(hidden_size=hidden, num_attention_heads=heads, mlp_ratio=ratio)
    slim.config = copy.deepcopy(dense.config)
    sync = save_pruned(slim, tmp_path)
    assert sync.exact and sync.changed == {
        'num_attention_heads': (4, heads), 'head_dim': (None, 16), **changed}
    again = type(dense).from_pretrained(tmp_path).eval()
    assert again.config.mlp_ratio == ratio
    assert torch.equal(_output(again, IMAGES), _output(slim, IMAGES))
