"""Non-persistent buffers in the config rewrite: no checkpoint holds them, so a reload
computes them from the config.  Gemma's ``embed_scale`` is ``sqrt(hidden_size)``: a config
rewritten to the pruned hidden size would reload without an error and compute other logits,
so that rewrite is refused and the channel file describes the hidden size instead."""
import pytest
import torch
import torch.nn as nn
from hf_builders import VOCAB, build, main_output, relative_error, token_inputs

import razorlib
from razorlib.integrations.transformers import (CHANNELS_FILE, load_pruned, prune, save_pruned,
                                                sync_config)
from razorlib.integrations.transformers.config import buffer_mismatches, buffer_values

transformers = pytest.importorskip('transformers')

EMBED_SCALE = 'model.embed_tokens.embed_scale'
#: The float the embedding keeps beside it, which ``_init_weights`` fills the buffer from.
SCALAR_EMBED_SCALE = 'model.embed_tokens.scalar_embed_scale'


def gemma(name: str, seed: int = 0) -> nn.Module:
    """A tiny Gemma (``gemma``) or Gemma2 (``gemma2``), 4 query heads of 16 over 2
    key/value heads in a hidden size of 64, in eval mode."""
    config, model = {'gemma': (transformers.GemmaConfig, transformers.GemmaForCausalLM),
                     'gemma2': (transformers.Gemma2Config, transformers.Gemma2ForCausalLM)}[name]
    torch.manual_seed(seed)
    return model(config(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                        vocab_size=VOCAB)).eval()


def _assert_reloads_exactly(slim, inputs, tmp_path):
    """save_pruned, then load_pruned (and from_pretrained where the config says it all)
    give the slim logits."""
    sync = save_pruned(slim, tmp_path)
    assert (tmp_path / CHANNELS_FILE).exists() != sync.exact
    expected = main_output(slim.eval(), inputs)
    again = [load_pruned(tmp_path)]
    if sync.exact:
        again.append(type(slim).from_pretrained(tmp_path).eval())
    for model in again:
        assert type(model) is type(slim)
        assert relative_error(main_output(model, inputs), expected) <= 1e-6
    return sync, again


@pytest.mark.parametrize('name', ['gemma', 'gemma2'])
def test_a_gemma_with_a_pruned_hidden_size_reloads_its_embedding_scale(name, tmp_path):
    model, inputs = gemma(name), token_inputs()
    with pytest.warns(UserWarning, match='embed_scale'):
        slim = prune(model, inputs, ratio=0.5, hidden=True)
    assert slim.model.norm.weight.shape == (32, )
    assert float(slim.model.embed_tokens.embed_scale) == 8.0  # sqrt(64), as the masked model
    assert slim.config.hidden_size == 64  # 32 would build embed_scale sqrt(32)
    sync, again = _assert_reloads_exactly(slim, inputs, tmp_path)
    assert not sync.exact
    assert [m.name for m in sync.refused] == [EMBED_SCALE, SCALAR_EMBED_SCALE]
    assert str(sync.refused[0]) == f'{EMBED_SCALE}: config builds 5.657, the model has 8.0'
    assert all(float(m.model.embed_tokens.embed_scale) == 8.0 for m in again)


def test_razorlib_prune_of_a_gemma_with_its_hidden_size_reloads_exactly(tmp_path):
    """The reproducer: razorlib.prune, save_pruned, load_pruned."""
    model, inputs = gemma('gemma'), token_inputs()
    with pytest.warns(UserWarning):
        slim = razorlib.prune(model, inputs, ratio=0.5, hidden=True).eval()
    sync, _ = _assert_reloads_exactly(slim, inputs, tmp_path)
    assert not sync.exact


@pytest.mark.parametrize('name', ['gemma', 'gemma2'])
def test_a_gemma_with_its_hidden_size_whole_still_reloads_from_its_config(name, tmp_path):
    """MLP widths and head counts leave embed_scale alone: the config says them."""
    model, inputs = gemma(name), token_inputs()
    slim = prune(model, inputs, ratio=0.5)
    assert slim.config.intermediate_size == 64 and slim.config.hidden_size == 64
    sync, _ = _assert_reloads_exactly(slim, inputs, tmp_path)
    assert sync.exact and not sync.refused


def test_llama_with_a_pruned_hidden_size_still_reloads_from_its_config(tmp_path):
    """RoPE's inv_freq, non-persistent too, depends on head_dim, which hidden=True keeps."""
    model, inputs = build('llama')
    with pytest.warns(UserWarning, match='outputs change'):
        slim = prune(model, inputs, ratio=0.5, hidden=True)
    assert (slim.config.hidden_size, slim.config.head_dim) == (32, 16)
    sync, _ = _assert_reloads_exactly(slim, inputs, tmp_path)
    assert sync.exact and not sync.refused
    assert not (tmp_path / CHANNELS_FILE).exists()


def _scaled(value: float, persistent: bool = False) -> nn.Module:
    model = nn.Module()
    model.inner = nn.Module()
    model.inner.register_buffer('scale', torch.tensor(value), persistent=persistent)
    return model


def test_buffer_mismatches_name_the_buffer_and_both_values():
    found = buffer_mismatches(_scaled(8.0), {'inner.scale': torch.tensor(32 ** 0.5)})
    assert [str(m) for m in found] == ['inner.scale: config builds 5.657, the model has 8.0']
    assert (found[0].config_shape, found[0].model_shape) == ((), ())
    assert buffer_mismatches(_scaled(8.0), {'inner.scale': torch.tensor(8.0)}) == []


def test_buffer_mismatches_of_several_values_name_the_first_that_differs():
    model = nn.Module()
    model.register_buffer('inv_freq', torch.tensor([1.0, 0.5, 0.25]), persistent=False)
    found = buffer_mismatches(model, {'inv_freq': torch.tensor([1.0, 0.5, 0.125])})
    assert [str(m) for m in found] == ['inv_freq: config builds 0.125 at [2] of 3, the model '
                                       'has 0.25 at [2] of 3']


def test_buffer_mismatches_skip_what_a_reload_does_not_compute_from_the_config():
    built = {'inner.scale': torch.tensor(5.0)}
    assert buffer_mismatches(_scaled(8.0, persistent=True), built) == []  # checkpointed
    assert buffer_mismatches(_scaled(8.0), {'inner.scale': torch.ones(2)}) == []  # a shape
    assert buffer_mismatches(_scaled(8.0), {}) == []
    # the value the unrewritten config builds too: the model changed it as it ran
    assert buffer_mismatches(_scaled(8.0), built, {'inner.scale': torch.tensor(5.0)}) == []


def test_buffer_mismatches_take_a_meta_buffer_from_the_unrewritten_config():
    """A model on ``meta`` (slim_checkpoint's) holds no values: the config it was built
    from gives them."""
    with torch.device('meta'):
        model = _scaled(8.0)
    reference = {'inner.scale': torch.tensor(8.0)}
    assert [m.name for m in buffer_mismatches(model, {'inner.scale': torch.tensor(5.0)},
                                              reference)] == ['inner.scale']
    assert buffer_mismatches(model, reference, reference) == []


def test_buffer_mismatches_allow_for_the_rounding_of_the_model_dtype():
    model = _scaled(8.0)
    model.inner.scale = torch.tensor(0.1, dtype=torch.bfloat16)
    assert buffer_mismatches(model, {'inner.scale': torch.tensor(0.1)}) == []
    assert len(buffer_mismatches(model, {'inner.scale': torch.tensor(0.11)})) == 1


def test_buffer_values_compute_buffers_from_a_config_with_parameters_on_meta():
    register, model = nn.Module.register_parameter, gemma('gemma')
    config = model.config.__class__.from_dict(model.config.to_dict())
    config.hidden_size = 32
    values = buffer_values(model, config)
    assert float(values[EMBED_SCALE]) == pytest.approx(32 ** 0.5)
    assert torch.equal(values['model.rotary_emb.inv_freq'], model.model.rotary_emb.inv_freq)
    assert EMBED_SCALE not in model.state_dict()
    assert buffer_values(model)[EMBED_SCALE] == 8.0
    assert nn.Module.register_parameter is register  # the patch is undone


def test_sync_config_refuses_a_hidden_size_whose_buffer_value_differs():
    model, inputs = gemma('gemma2'), token_inputs()
    with pytest.warns(UserWarning):
        slim = prune(model, inputs, ratio=0.5, hidden=True)
    slim.config.hidden_size = 64  # as the dense config, whatever prune wrote
    sync = sync_config(slim)
    assert 'hidden_size' not in sync.changed and not sync.exact
    assert [m.name for m in sync.refused] == [EMBED_SCALE, SCALAR_EMBED_SCALE]
    assert not any(m.name == EMBED_SCALE for m in sync.mismatches)


def test_a_bf16_gemma_with_most_of_its_hidden_size_keeps_its_embedding_scale(tmp_path):
    # sqrt(60) is 7.75 in bf16 where the slim model holds 8: within 8 bf16 rounding steps,
    # which the check once allowed; it compares exactly now and leaves the width to the
    # channel file
    gemma('gemma').save_pretrained(tmp_path / 'dense')  # loaded as bf16, as users do
    model = transformers.GemmaForCausalLM.from_pretrained(tmp_path / 'dense',
                                                          dtype=torch.bfloat16).eval()
    inputs, tmp_path = token_inputs(), tmp_path / 'slim'
    with pytest.warns(UserWarning, match='embed_scale'):
        slim = prune(model, inputs, ratio=0.9375, hidden=True)
    assert slim.model.norm.weight.shape == (60, ) and slim.config.hidden_size == 64
    sync, again = _assert_reloads_exactly(slim, inputs, tmp_path)
    assert [m.name for m in sync.refused] == [EMBED_SCALE, SCALAR_EMBED_SCALE]
    assert all(float(m.model.embed_tokens.embed_scale) == 8.0 for m in again)
