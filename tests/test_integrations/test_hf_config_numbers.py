"""Float attributes in the config rewrite: a module's ``__init__`` computes them from the
config and no checkpoint holds them, as a non-persistent buffer.  BioGPT's (and BART's,
Whisper's, Marian's...) ``embed_scale`` is a plain float, ``sqrt(hidden_size)``: a config
rewritten to the pruned hidden size reloaded without an error and scaled the embeddings
by 5.66 where the slim model scales them by 8, so that rewrite is refused and the channel
file describes the hidden size instead."""
import pytest
import torch
import torch.nn as nn
from hf_builders import VOCAB, main_output, token_inputs

from razorlib.integrations.transformers import CHANNELS_FILE, load_pruned, prune, save_pruned
from razorlib.integrations.transformers.config import module_numbers, number_mismatches

transformers = pytest.importorskip('transformers')

EMBED_SCALE = 'biogpt.embed_tokens.embed_scale'


def biogpt(scale_embedding: bool = True) -> nn.Module:
    """A tiny BioGPT (4 heads of 16 in a hidden size of 64) in eval mode; its config
    scales the embeddings by ``sqrt(hidden_size)`` by default."""
    torch.manual_seed(0)
    return transformers.BioGptForCausalLM(transformers.BioGptConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        vocab_size=VOCAB, max_position_embeddings=32,
        scale_embedding=scale_embedding)).eval()


def test_a_biogpt_with_a_pruned_hidden_size_reloads_its_embedding_scale(tmp_path):
    model, inputs = biogpt(), token_inputs()
    with pytest.warns(UserWarning, match=rf'otherwise: {EMBED_SCALE}: config builds 5.657, '
                      r'the model has 8.0'):
        slim = prune(model, inputs, ratio=0.5, hidden=True)
    assert slim.biogpt.layer_norm.weight.shape == (32, )
    assert slim.biogpt.embed_tokens.embed_scale == 8.0  # sqrt(64), as the masked model
    assert slim.config.hidden_size == 64  # 32 would build embed_scale sqrt(32)
    sync = save_pruned(slim, tmp_path)
    assert not sync.exact and (tmp_path / CHANNELS_FILE).exists()
    assert [str(m) for m in sync.refused] == [f'{EMBED_SCALE}: config builds 5.657, the '
                                              'model has 8.0']
    again = load_pruned(tmp_path)
    assert again.biogpt.embed_tokens.embed_scale == 8.0
    assert torch.equal(main_output(again, inputs), main_output(slim.eval(), inputs))


def test_a_biogpt_without_the_scale_still_reloads_its_hidden_size_from_its_config(tmp_path):
    """A scale of 1.0 at any hidden size: the rewrite holds, from_pretrained reloads."""
    model, inputs = biogpt(scale_embedding=False), token_inputs()
    with pytest.warns(UserWarning, match='outputs change'):
        slim = prune(model, inputs, ratio=0.5, hidden=True)
    assert (slim.config.hidden_size, slim.config.num_attention_heads) == (32, 2)
    sync = save_pruned(slim, tmp_path)
    assert sync.exact and not sync.refused
    again = type(slim).from_pretrained(tmp_path).eval()
    assert torch.equal(main_output(again, inputs), main_output(slim.eval(), inputs))


def _scaled(value: float) -> nn.Module:
    model = nn.Module()
    model.inner = nn.Module()
    model.inner.scale, model.inner.width = value, 64
    return model


def test_number_mismatches_name_the_attribute_and_both_values():
    assert [str(m) for m in number_mismatches(_scaled(8.0), _scaled(32 ** 0.5))] == [
        'inner.scale: config builds 5.657, the model has 8.0']
    assert number_mismatches(_scaled(8.0), _scaled(8.0)) == []
    assert number_mismatches(_scaled(float('nan')), _scaled(float('nan'))) == []


def test_number_mismatches_skip_widths_and_what_the_unrewritten_config_builds_too():
    narrower = _scaled(8.0)
    narrower.inner.width = 32  # an int: a width the rewrite changes on purpose
    assert number_mismatches(_scaled(8.0), narrower) == []
    # the value the unrewritten config builds too: not the rewrite's doing
    assert number_mismatches(_scaled(8.0), _scaled(5.0), {'inner.scale': 5.0}) == []
    assert len(number_mismatches(_scaled(8.0), _scaled(5.0), {'inner.scale': 8.0})) == 1


def test_module_numbers_list_plain_numbers_but_the_skipped_and_private_ones():
    model = _scaled(8.0)
    model.inner._hidden, model.inner.layer_idx = 1.0, 3
    assert module_numbers(model, skip=('training', 'layer_idx')) == {
        'inner.scale': 8.0, 'inner.width': 64}
