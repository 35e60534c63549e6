"""slim_checkpoint: a dense sharded safetensors checkpoint sliced shard by shard loads
as the slim model pruned in memory, and a checkpoint that does not fit fails naming the
file and tensor at fault before anything is written."""
import contextlib
import json
import random
from pathlib import Path

import pytest
import torch
from hf_builders import build, main_output

import razorlib.pruning.structure
from razorlib.integrations.transformers import (CHANNELS_FILE, HEAD_WIDTHS_FILE, load_pruned,
                                                prune, save_pruned, slim_checkpoint)
from razorlib.pruning import ChannelConfig, ChannelSelection
from razorlib.pruning.slicing import slim_model

safetensors = pytest.importorskip('safetensors')
from safetensors.torch import load_file, save_file  # noqa: E402

INDEX = 'model.safetensors.index.json'


@pytest.fixture
def exported(monkeypatch):
    """The channel configs that pruners deploy, relative to the dense model."""
    seen = []
    real = razorlib.pruning.structure.slim_model

    def recording(model, channel_cfg, layer_kinds=None):
        seen.append(channel_cfg)
        return real(model, channel_cfg, layer_kinds)

    monkeypatch.setattr(razorlib.pruning.structure, 'slim_model', recording)
    return seen


def save_dense(model, folder: Path) -> list:
    """Save with small shards; returns the shard names."""
    model.save_pretrained(folder, max_shard_size='50KB')
    shards = sorted(set(json.loads((folder / INDEX).read_text())['weight_map'].values()))
    assert len(shards) > 2
    return shards


def assert_same_logits(folder: Path, slim, inputs) -> None:
    again = load_pruned(folder)
    assert type(again) is type(slim)
    assert torch.equal(main_output(again, inputs), main_output(slim.eval(), inputs))


def test_uniform_pruning_streams_to_the_in_memory_slim_model(tmp_path, exported):
    model, inputs = build('llama')
    shards = save_dense(model, tmp_path / 'dense')
    slim = prune(model, inputs, ratio=0.5)
    attention = slim.model.layers[0].self_attn
    assert (attention.q_proj.out_features, attention.k_proj.out_features) == (32, 16)
    sync = slim_checkpoint(tmp_path / 'dense', exported[-1], tmp_path / 'slim')
    assert sync.changed['intermediate_size'] == (128, 64)
    assert (tmp_path / 'slim' / CHANNELS_FILE).exists() == (not sync.exact)
    assert sorted(p.name for p in (tmp_path / 'slim').glob('*.safetensors')) == shards
    assert_same_logits(tmp_path / 'slim', slim, inputs)


def test_per_layer_widths_stream_with_a_channel_file(tmp_path, exported):
    model, inputs = build('llama')
    save_dense(model, tmp_path / 'dense')
    random.seed(3)
    slim = prune(model, inputs, pruner=dict(type='RatioPruner', ratios=(0.25, 0.75)),
                 uniform=False)
    assert len({layer.mlp.up_proj.out_features for layer in slim.model.layers}) == 2
    sync = slim_checkpoint(tmp_path / 'dense', exported[-1].to_dict(), tmp_path / 'slim')
    assert not sync.exact and (tmp_path / 'slim' / CHANNELS_FILE).exists()
    assert_same_logits(tmp_path / 'slim', slim, inputs)


def test_a_checkpoint_with_two_channel_files_streams_to_one_with_two(tmp_path, exported):
    """GPT-2 pruned to narrower heads, then fewer: the source checkpoint needs a second
    channel file to rebuild, and so does the slim one after a third prune."""
    model, inputs = build('gpt2')
    twice = prune(prune(model, inputs, ratio=0.5, heads='width'), inputs, ratio=0.5)
    save_pruned(twice, tmp_path / 'twice', max_shard_size='50KB')
    assert (tmp_path / 'twice' / HEAD_WIDTHS_FILE).exists()
    thrice = prune(twice, inputs, ratio=0.5)  # one head of 8 left of 2
    assert [block.attn.c_attn.nf for block in thrice.transformer.h] == [24, 24]
    slim_checkpoint(tmp_path / 'twice', exported[-1], tmp_path / 'slim')
    assert (tmp_path / 'slim' / CHANNELS_FILE).exists()
    assert (tmp_path / 'slim' / HEAD_WIDTHS_FILE).exists()
    assert_same_logits(tmp_path / 'slim', thrice, inputs)


def test_checkpoints_stored_under_legacy_names_keep_them(tmp_path, exported):
    model, inputs = build('vit')  # transformers 5 saves vit.layers.0 as vit.encoder.layer.0
    save_dense(model, tmp_path / 'dense')
    slim = prune(model, inputs, ratio=0.5)
    slim_checkpoint(tmp_path / 'dense', exported[-1], tmp_path / 'slim')
    names = json.loads((tmp_path / 'slim' / INDEX).read_text())['weight_map']
    assert names.keys() == json.loads((tmp_path / 'dense' / INDEX).read_text())['weight_map'].keys()
    assert 'vit.encoder.layer.1.intermediate.dense.weight' in names
    assert_same_logits(tmp_path / 'slim', slim, inputs)


def _hidden_config(keep=range(0, 64, 2)) -> ChannelConfig:
    """Prune Llama's hidden size (RMSNorm has no layer kind, so pruners leave it whole)."""
    sel = ChannelSelection(64, tuple(keep))
    cfg = ChannelConfig({'model.embed_tokens': {'out': sel}, 'lm_head': {'in': sel}},
                        {'model.norm.weight': {0: sel}})
    for i in range(2):
        layer = f'model.layers.{i}'
        cfg.params.update({f'{layer}.{norm}.weight': {0: sel}
                           for norm in ('input_layernorm', 'post_attention_layernorm')})
        cfg.modules.update({f'{layer}.{proj}': {'in': sel} for proj in (
            'self_attn.q_proj', 'self_attn.k_proj', 'self_attn.v_proj', 'mlp.gate_proj',
            'mlp.up_proj')})
        cfg.modules.update({f'{layer}.{proj}': {'out': sel}
                            for proj in ('self_attn.o_proj', 'mlp.down_proj')})
    return cfg


def test_tied_embeddings_stay_tied_when_the_hidden_size_is_pruned(tmp_path):
    model, inputs = build('llama', tie_word_embeddings=True)
    save_dense(model, tmp_path / 'dense')
    _hidden_config().dump(tmp_path / 'channels.yaml')
    slim_checkpoint(tmp_path / 'dense', tmp_path / 'channels.yaml', tmp_path / 'slim')
    stored = json.loads((tmp_path / 'slim' / INDEX).read_text())['weight_map']
    assert 'lm_head.weight' not in stored and 'model.embed_tokens.weight' in stored
    again = load_pruned(tmp_path / 'slim')
    assert again.lm_head.weight is again.model.embed_tokens.weight
    assert again.lm_head.weight.shape == (100, 32)
    slim = slim_model(model, _hidden_config())
    assert torch.equal(main_output(again, inputs), main_output(slim, inputs))


def _mlp_config(raw: int = 128, keep=range(0, 128, 2)) -> ChannelConfig:
    sel = ChannelSelection(raw, tuple(keep))
    return ChannelConfig({f'model.layers.{i}.mlp.{proj}': {axis: sel} for i in range(2)
                          for proj, axis in (('gate_proj', 'out'), ('up_proj', 'out'),
                                             ('down_proj', 'in'))})


def test_reads_one_shard_at_a_time_and_writes_each_before_the_next(tmp_path, monkeypatch):
    model, _ = build('llama')
    shards = save_dense(model, tmp_path / 'dense')
    events, real_open, real_save = [], safetensors.safe_open, safetensors.torch.save_file

    @contextlib.contextmanager
    def logged_open(path, *args, **kwargs):
        events.append(('open', Path(path).name))
        with real_open(path, *args, **kwargs) as handle:
            yield handle
        events.append(('close', Path(path).name))

    def logged_save(tensors, path, *args, **kwargs):
        events.append(('save', Path(path).name))
        real_save(tensors, path, *args, **kwargs)

    monkeypatch.setattr(safetensors, 'safe_open', logged_open)
    monkeypatch.setattr(safetensors.torch, 'save_file', logged_save)
    slim_checkpoint(tmp_path / 'dense', _mlp_config(), tmp_path / 'slim')
    open_now = 0
    for kind, _ in events:
        open_now += {'open': 1, 'close': -1, 'save': 0}[kind]
        assert open_now <= 1
    streamed = [(kind, name) for name in shards for kind in ('open', 'close', 'save')]
    assert events[-len(streamed):] == streamed


def test_unsliced_tensors_are_copied_and_sliced_ones_keep_the_chosen_rows(tmp_path):
    model, _ = build('llama')
    model.save_pretrained(tmp_path / 'dense')  # one file, no index
    slim_checkpoint(tmp_path / 'dense', _mlp_config(), tmp_path / 'slim')
    assert not (tmp_path / 'slim' / INDEX).exists()
    tensors = load_file(tmp_path / 'slim' / 'model.safetensors')
    up = model.model.layers[1].mlp.up_proj.weight
    assert torch.equal(tensors['model.layers.1.mlp.up_proj.weight'], up[::2])
    assert torch.equal(tensors['model.norm.weight'], model.model.norm.weight)
    assert json.loads((tmp_path / 'slim' / 'config.json').read_text())['intermediate_size'] \
        == 64


@pytest.fixture
def dense(tmp_path):
    model, _ = build('llama', tie_word_embeddings=True)
    save_dense(model, tmp_path / 'dense')
    return tmp_path / 'dense'


def _shard_of(folder: Path, key: str) -> Path:
    return folder / json.loads((folder / INDEX).read_text())['weight_map'][key]


def _rewrite(shard: Path, edit) -> None:
    tensors = load_file(shard)
    edit(tensors)
    save_file(tensors, shard, metadata={'format': 'pt'})


def test_a_missing_shard_is_named(dense, tmp_path):
    shard = _shard_of(dense, 'model.layers.1.mlp.up_proj.weight')
    shard.unlink()
    with pytest.raises(FileNotFoundError, match=f'names shard {shard.name}, which is missing'):
        slim_checkpoint(dense, _mlp_config(), tmp_path / 'slim')
    assert not (tmp_path / 'slim').exists()


def test_a_sliced_tensor_that_no_shard_holds_is_named(dense, tmp_path):
    key = 'model.layers.1.mlp.up_proj.weight'
    _rewrite(_shard_of(dense, key), lambda tensors: tensors.pop(key))
    with pytest.raises(ValueError, match=f"slices '{key}', which no shard"):
        slim_checkpoint(dense, _mlp_config(), tmp_path / 'slim')
    assert not (tmp_path / 'slim').exists()


def test_a_tensor_of_another_shape_is_named_with_its_file(dense, tmp_path):
    key = 'model.layers.0.mlp.gate_proj.weight'
    shard = _shard_of(dense, key)
    _rewrite(shard, lambda tensors: tensors.update({key: tensors[key][:96]}))
    with pytest.raises(ValueError, match=rf"{shard.name}: tensor '{key}' has shape \(96, 64\), "
                                         r'the LlamaForCausalLM built from config.json has '
                                         r'\(128, 64\)'):
        slim_checkpoint(dense, _mlp_config(), tmp_path / 'slim')


def test_a_tensor_the_model_lacks_is_named(dense, tmp_path):
    shard = _shard_of(dense, 'model.norm.weight')
    _rewrite(shard, lambda tensors: tensors.update({'model.extra': torch.zeros(2)}))
    with pytest.raises(ValueError, match=f"{shard.name}: tensor 'model.extra' is not in"):
        slim_checkpoint(dense, _mlp_config(), tmp_path / 'slim')


def test_a_config_for_another_model_names_the_module(dense, tmp_path):
    with pytest.raises(ValueError, match='model.layers.0.mlp.gate_proj: the channel config '
                                         'expects 96'):
        slim_checkpoint(dense, _mlp_config(96, range(48)), tmp_path / 'slim')


def test_tied_tensors_sliced_apart_are_refused(dense, tmp_path):
    cfg = ChannelConfig({'model.embed_tokens': {'out': ChannelSelection(64, range(32))}})
    with pytest.raises(ValueError, match="tied tensors 'model.embed_tokens.weight' and "
                                         "'lm_head.weight' differently"):
        slim_checkpoint(dense, cfg, tmp_path / 'slim')


def test_folders_without_safetensors_or_the_source_itself_are_refused(dense, tmp_path):
    with pytest.raises(ValueError, match='cannot write over'):
        slim_checkpoint(dense, _mlp_config(), dense)
    (dense / INDEX).unlink()
    with pytest.raises(FileNotFoundError, match='neither model.safetensors nor'):
        slim_checkpoint(dense, _mlp_config(), tmp_path / 'slim')
