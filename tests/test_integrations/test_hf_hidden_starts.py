"""``hidden=False`` keeps the hidden size of a residual stream that does not start at the
input embeddings: Whisper's encoder starts at its convolutions plus ``embed_positions``
(``get_input_embeddings`` names ``conv1``, or the decoder's tokens).  Before, its hidden
size pruned 64 -> 32 with every encoder norm under the default that keeps it whole."""
import warnings

import pytest
import torch

import razorlib
from razorlib.integrations.transformers import hidden_size_keys, load_pruned, prune, save_pruned

transformers = pytest.importorskip('transformers')


def _whisper(cls: str):
    torch.manual_seed(0)
    return getattr(transformers, cls)(transformers.WhisperConfig(
        d_model=64, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, num_mel_bins=16,
        max_source_positions=8, max_target_positions=16, vocab_size=100, num_labels=3,
        pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)).eval()


@pytest.mark.parametrize('cls,encoder', [('WhisperForAudioClassification', 'encoder'),
                                         ('WhisperForConditionalGeneration', 'model.encoder')])
def test_whisper_encoder_keeps_its_hidden_size_unless_asked(cls, encoder):
    model = _whisper(cls)
    inputs = {'input_features': torch.randn(2, 16, 16, generator=torch.Generator().manual_seed(0))}
    if cls == 'WhisperForConditionalGeneration':
        inputs['decoder_input_ids'] = torch.randint(3, 100, (2, 5))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        slim = razorlib.prune(model, inputs, ratio=0.5)
    assert not any('norm takes its statistics over' in str(w.message) for w in caught)
    widths = {name: slim.get_submodule(f'{encoder}.{name}').weight.shape[0]
              for name in ('conv2', 'layer_norm', 'layers.0.self_attn_layer_norm',
                           'layers.0.fc2', 'layers.0.fc1')}
    assert widths == {'conv2': 64, 'layer_norm': 64, 'layers.0.self_attn_layer_norm': 64,
                      'layers.0.fc2': 64, 'layers.0.fc1': 64}  # fc1: the MLP, 128 -> 64
    assert f'{encoder}.embed_positions' in hidden_size_keys(model)
    if cls == 'WhisperForAudioClassification':  # asked: it prunes, and says so
        with pytest.warns(UserWarning, match=r'hidden=True\) pruned the hidden size'):
            slim = razorlib.prune(model, inputs, ratio=0.5, hidden=True)
        assert slim.encoder.conv2.out_channels == slim.encoder.layer_norm.weight.shape[0] == 32


def test_whisper_with_an_odd_hidden_size_reloads(tmp_path):
    """``load_pruned`` skips transformers' initialisation of modules whose tensors were
    all loaded.  Before, Whisper's ``_init_weights`` computed
    ``sinusoids(*embed_positions.weight.shape)`` for the loaded table anyway (the copy
    is a no-op on it), and for an odd hidden size that raised ``Number of channels has
    to be divisible by 2``: the model saved but did not reload."""
    model = _whisper('WhisperForAudioClassification')
    inputs = {'input_features': torch.randn(2, 16, 16, generator=torch.Generator().manual_seed(0))}
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')  # the hidden size pruned; the config cannot say it
        slim = prune(model, inputs, flops=0.6, hidden=True)
    assert slim.encoder.conv2.out_channels == slim.encoder.embed_positions.weight.shape[1] == 49
    save_pruned(slim, tmp_path)
    again = load_pruned(tmp_path)
    with torch.no_grad():
        assert torch.equal(again(**inputs).logits, slim(**inputs).logits)
    assert torch.equal(again.encoder.embed_positions.weight, slim.encoder.embed_positions.weight)
